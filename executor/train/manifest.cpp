#include "executor/train/manifest.h"

#include <cstdlib>
#include <iostream>
#include <limits>

#include "schema/digest.h"
#include "schema/error.h"
#include "schema/json_text.h"

namespace mfsdp::executor {
namespace {

using json = nlohmann::ordered_json;

// The integer `key` of `doc`. nlohmann's get<int64_t>() would cast a floating-point number
// (undefined beyond 2^63, silently truncated below) and wrap an unsigned one beyond 2^63 - 1;
// other types and a missing key throw json exceptions, which callers report as damage.
int64_t integer(const json& doc, const char* key, const std::string& where) {
  const json& value = doc.at(key);
  if (value.is_number_float() ||
      (value.is_number_unsigned() &&
       value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    fail(ExitCode::kUsage, where + " is damaged (" + key + " is " + value.dump() +
                               ", not an integer of 64 bits); use another checkpoint");
  }
  return value.get<int64_t>();
}

// SHA-256 of the manifest without its "checksum", keys sorted and without spaces, so that
// layout does not count. It chains the checkpoint together: rank files and plan.json are
// checked against the digests the manifest lists, and those digests against this.
std::string manifest_checksum(const json& doc) {
  nlohmann::json canonical = nlohmann::json::parse(doc.dump());
  canonical.erase("checksum");
  return schema::sha256_hex(canonical.dump());
}

bool unchecked_manifests_accepted() {
  const char* value = std::getenv(kAcceptUncheckedManifest);
  return value != nullptr && std::string(value) == "1";
}

}  // namespace

json rank_entry_to_json(const RankFileEntry& e) {
  return {{"rank", e.rank}, {"file", e.file}, {"bytes", e.bytes}, {"sha256", e.sha256}};
}

RankFileEntry rank_entry_from_json(const json& doc, const std::string& where) {
  RankFileEntry entry;
  try {
    entry = {integer(doc, "rank", where), doc.at("file").get<std::string>(),
             integer(doc, "bytes", where), doc.at("sha256").get<std::string>()};
  } catch (const json::exception& e) {
    fail(ExitCode::kUsage, where + " is damaged (" + e.what() + "); use another checkpoint");
  }
  // Rank files lie in the checkpoint directory itself: a path in an edited manifest would
  // make resume or export read any file the user can.
  const std::string& file = entry.file;
  if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
      file.find('\0') != std::string::npos) {
    fail(ExitCode::kUsage, where + " names rank file '" + file +
                               "', which is not a file name in the checkpoint directory (edited "
                               "or damaged); use another checkpoint");
  }
  return entry;
}

std::string dump_manifest(const Manifest& m) {
  nlohmann::ordered_json doc;
  doc["format"] = kCheckpointFormat;
  doc["step"] = m.step;
  doc["mesh"] = {{"world_size", m.mesh.world_size},
                 {"shard_size", m.mesh.shard_size},
                 {"replicate_size", m.mesh.replicate_size}};
  doc["plan"] = {{"file", kPlanFile}, {"sha256", m.plan_sha256}};
  doc["model"] = {{"path", m.model_path}, {"structural_hash", m.model_structural_hash}};
  doc["optimizer"] = m.optimizer;
  doc["config"] = nlohmann::ordered_json::parse(m.config.dump());
  doc["ranks"] = nlohmann::ordered_json::array();
  for (const auto& r : m.ranks) doc["ranks"].push_back(rank_entry_to_json(r));
  if (!m.resharded_from.is_null()) doc["resharded_from"] = m.resharded_from;
  doc["checksum"] = manifest_checksum(doc);
  return doc.dump(2) + "\n";
}

Manifest parse_manifest(const std::string& text, const std::string& path) {
  json doc;
  const std::string error = schema::parse_json_text(text, doc);
  if (!error.empty()) {
    fail(ExitCode::kUsage,
         path + " is damaged (not valid JSON: " + error + "); use another checkpoint");
  }
  try {
    const std::string format = doc.at("format").get<std::string>();
    if (format != kCheckpointFormat) {
      fail(ExitCode::kUsage, path + " is format '" + format + "' but this build reads " +
                                 kCheckpointFormat + "; use the mfsdp that wrote it");
    }
    // Every manifest this mfsdp writes carries its checksum, so one without it was stripped
    // (or is older than the checksum): refused, unless the user vouches for it.
    if (!doc.contains("checksum")) {
      if (!unchecked_manifests_accepted()) {
        fail(ExitCode::kUsage,
             path +
                 " has no checksum: mfsdp writes one into every manifest, so it was removed "
                 "or the checkpoint is older than mfsdp of 2026-12-04; use another checkpoint, "
                 "or set " +
                 kAcceptUncheckedManifest + "=1 to read one you trust unchecked");
      }
      std::cerr << "mfsdp: warning: " << path << " has no checksum; reading it unchecked because "
                << kAcceptUncheckedManifest << "=1 (its rank files and plan are still checked "
                << "against the digests it lists)\n";
    } else if (doc.at("checksum").get<std::string>() != manifest_checksum(doc)) {
      fail(ExitCode::kUsage, path +
                                 " does not match its own checksum: it was edited or damaged "
                                 "after the save; use another checkpoint");
    }
    Manifest m;
    m.step = integer(doc, "step", path);
    const json& mesh = doc.at("mesh");
    m.mesh.world_size = integer(mesh, "world_size", path);
    m.mesh.shard_size = integer(mesh, "shard_size", path);
    m.mesh.replicate_size = integer(mesh, "replicate_size", path);
    m.plan_sha256 = doc.at("plan").at("sha256").get<std::string>();
    m.model_path = doc.at("model").at("path").get<std::string>();
    m.model_structural_hash = doc.at("model").at("structural_hash").get<std::string>();
    m.optimizer = doc.at("optimizer");
    m.config = nlohmann::json::parse(doc.at("config").dump());
    for (const json& r : doc.at("ranks")) m.ranks.push_back(rank_entry_from_json(r, path));
    if (doc.contains("resharded_from")) m.resharded_from = doc.at("resharded_from");
    return m;
  } catch (const json::exception& e) {
    fail(ExitCode::kUsage, path + " is damaged (" + e.what() + "); use another checkpoint");
  }
}

}  // namespace mfsdp::executor
