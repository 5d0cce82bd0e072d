#include "planner/scope_file.h"

#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "schema/error.h"
#include "schema/json_text.h"
#include "schema/plan_json.h"

namespace mfsdp::planner {
namespace {

using nlohmann::json;

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void bad(const std::string& where, const std::string& what) const {
    fail(ExitCode::kUsage, path_ + ": " + where + ": " + what);
  }

  // `where` is "" for the top level.
  void only_keys(const json& object, const std::string& where,
                 const std::set<std::string>& allowed) const {
    if (!object.is_object()) bad(where.empty() ? "top level" : where, "expected an object");
    for (const auto& item : object.items()) {
      if (!allowed.count(item.key())) {
        std::string list;
        for (const auto& k : allowed) list += (list.empty() ? "" : ", ") + k;
        bad(where.empty() ? item.key() : where + "." + item.key(),
            "unknown field (expected one of: " + list + ")");
      }
    }
  }

  int64_t integer(const json& v, const std::string& where) const {
    if (!v.is_number_integer()) bad(where, "expected an integer");
    // An integer beyond int64_t is unsigned here; get<int64_t> would wrap it to a negative.
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) {
      bad(where,
          v.dump() + " is out of range; the largest integer here is " + std::to_string(INT64_MAX));
    }
    return v.get<int64_t>();
  }
  bool boolean(const json& v, const std::string& where) const {
    if (!v.is_boolean()) bad(where, "expected true or false");
    return v.get<bool>();
  }
  std::string string(const json& v, const std::string& where) const {
    if (!v.is_string()) bad(where, "expected a string");
    return v.get<std::string>();
  }

 private:
  std::string path_;
};

}  // namespace

ScopeFile read_scope_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ExitCode::kUsage, path + ": cannot open the scope file (does it exist?)");
  std::stringstream text;
  text << in.rdbuf();
  json doc;
  const std::string error = schema::parse_json_text(text.str(), doc);
  if (!error.empty()) fail(ExitCode::kUsage, path + ": not valid JSON: " + error);
  Reader r(path);
  r.only_keys(doc, "", {"mesh", "policy", "fully_shard", "training"});
  ScopeFile out;
  if (doc.contains("mesh")) {
    const json& mesh = doc["mesh"];
    r.only_keys(mesh, "mesh", {"world_size", "replicate_size"});
    if (mesh.contains("world_size"))
      out.world_size = r.integer(mesh["world_size"], "mesh.world_size");
    if (mesh.contains("replicate_size")) {
      out.replicate_size = r.integer(mesh["replicate_size"], "mesh.replicate_size");
    }
  }
  if (doc.contains("policy")) {
    const json& p = doc["policy"];
    r.only_keys(p, "policy",
                {"param_dtype", "reduce_dtype", "reshard_after_forward", "forward_prefetch",
                 "backward_prefetch", "resident_budget_bytes", "unified_stream", "align_bytes"});
    schema::Policy& policy = out.policy;
    for (const auto& item : p.items()) {
      const std::string& key = item.key();
      const std::string where = "policy." + key;
      const json& v = item.value();
      if (key == "param_dtype") {
        policy.param_dtype = v.is_null() ? std::nullopt : std::optional(r.string(v, where));
      } else if (key == "reduce_dtype") {
        policy.reduce_dtype = r.string(v, where);
      } else if (key == "reshard_after_forward") {
        policy.reshard_after_forward = r.boolean(v, where);
      } else if (key == "forward_prefetch") {
        policy.forward_prefetch = r.integer(v, where);
      } else if (key == "backward_prefetch") {
        policy.backward_prefetch = r.integer(v, where);
      } else if (key == "resident_budget_bytes") {
        policy.resident_budget_bytes = r.integer(v, where);
      } else if (key == "unified_stream") {
        policy.unified_stream = r.boolean(v, where);
      } else {
        policy.align_bytes = r.integer(v, where);
      }
      out.policy_set.push_back(key);
    }
  }
  if (!doc.contains("fully_shard") || !doc["fully_shard"].is_array() ||
      doc["fully_shard"].empty()) {
    r.bad("fully_shard",
          "expected a non-empty list of module path globs, {\"module\": GLOB} "
          "or {\"type\": NAME}");
  }
  const json& calls = doc["fully_shard"];
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string where = "fully_shard[" + std::to_string(i) + "]";
    const std::string source = path + ": " + where;
    if (calls[i].is_string()) {
      out.units.push_back({UnitSelector::Kind::kPath, calls[i].get<std::string>(), source});
    } else {
      r.only_keys(calls[i], where, {"module", "type", "checkpoint", "reshard_after_forward"});
      const bool is_type = calls[i].contains("type");
      if (is_type == calls[i].contains("module")) {
        r.bad(where, "give exactly one of \"module\" or \"type\"");
      }
      const char* key = is_type ? "type" : "module";
      UnitSelector selector(is_type ? UnitSelector::Kind::kType : UnitSelector::Kind::kPath,
                            r.string(calls[i][key], where), source);
      if (calls[i].contains("checkpoint")) {
        selector.checkpoint = r.boolean(calls[i]["checkpoint"], where + ".checkpoint");
      }
      if (calls[i].contains("reshard_after_forward")) {
        selector.reshard_after_forward =
            r.boolean(calls[i]["reshard_after_forward"], where + ".reshard_after_forward");
      }
      out.units.push_back(std::move(selector));
    }
  }
  if (doc.contains("training")) {
    out.training = schema::training_from_json(doc["training"], path, "training");
  }
  return out;
}

}  // namespace mfsdp::planner
