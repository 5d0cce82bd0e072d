// A checkpoint's manifest.json through what resume, export and latest_checkpoint do with its
// text: parse_manifest (JSON text, format, checksum, fields, rank file names). Its only
// documented error is a usage error. The checksum is mandatory, so an input that is a JSON
// object without one is also read sealed with its right checksum, to reach the fields. A manifest
// that reads must name its rank files inside the checkpoint directory, and must write back as
// itself: dump_manifest, read again, dump again gives the same bytes.

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "executor/train/manifest.h"
#include "schema/digest.h"
#include "schema/error.h"
#include "schema/json_text.h"
#include "tests/fuzz/harness.h"

namespace mfsdp::fuzz {
namespace {

const std::string kPath = "ckpt/step-00000001/manifest.json";

void check_rank_files(const executor::Manifest& manifest) {
  for (const executor::RankFileEntry& entry : manifest.ranks) {
    const std::string& file = entry.file;
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos) {
      finding("a manifest that reads names rank file '" + file + "' outside its directory");
    }
  }
}

void check_rewrite(const executor::Manifest& manifest) {
  const std::string text = executor::dump_manifest(manifest);
  executor::Manifest again;
  try {
    again = executor::parse_manifest(text, kPath);
  } catch (const Error& error) {
    finding(std::string("a manifest as dump_manifest writes it does not read: ") + error.what());
  }
  if (executor::dump_manifest(again) != text) {
    finding("a manifest read back from dump_manifest's bytes dumps to other bytes");
  }
}

// `text` with the checksum a save would have written, when it is a JSON object without one.
bool sealed(const std::string& text, std::string& out) {
  // Depth-limited, as parse_manifest reads it; then sorted, as the checksum is taken.
  nlohmann::ordered_json ordered;
  if (!schema::parse_json_text(text, ordered).empty()) return false;
  if (!ordered.is_object() || ordered.contains("checksum")) return false;
  nlohmann::json doc = nlohmann::json::parse(ordered.dump());
  const std::string checksum = schema::sha256_hex(doc.dump());  // sorted keys, no spaces
  doc["checksum"] = checksum;
  out = doc.dump();
  return true;
}

void read(const std::string& text) {
  expect_only_usage_errors([&] {
    const executor::Manifest manifest = executor::parse_manifest(text, kPath);
    check_rank_files(manifest);
    check_rewrite(manifest);
  });
}

}  // namespace
}  // namespace mfsdp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mfsdp;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::read(text);
  std::string with_checksum;
  if (fuzz::sealed(text, with_checksum)) fuzz::read(with_checksum);
  return 0;
}
