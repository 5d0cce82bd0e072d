#pragma once
// manifest.json, the table of contents of a checkpoint directory (docs/checkpoints.md): what
// it holds, how it is written, and how its text is read back and checked. No LibTorch, so the
// reader can be fuzzed (tests/fuzz/manifest_fuzzer.cpp); checkpoint_format.h adds the files.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schema/plan.h"

namespace mfsdp::executor {

inline constexpr const char* kCheckpointFormat = "mfsdp.checkpoint/1";
inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kPlanFile = "plan.json";
// Set to 1, this environment variable lets a manifest without a checksum (one older than the
// checksum, 2026-12-04) be read, with a warning; otherwise it is refused.
inline constexpr const char* kAcceptUncheckedManifest = "MFSDP_ACCEPT_UNCHECKED_MANIFEST";

struct RankFileEntry {
  int64_t rank = 0;
  std::string file;  // relative to the checkpoint directory
  int64_t bytes = 0;
  std::string sha256;
};

struct Manifest {
  int64_t step = 0;
  schema::Mesh mesh;
  std::string plan_sha256;  // of plan.json's bytes
  std::string model_path;   // absolute
  std::string model_structural_hash;
  nlohmann::ordered_json optimizer;  // the OptimizerConfig, as an object
  nlohmann::json config;             // TrainingState::config
  std::vector<RankFileEntry> ranks;
  // Written by `mfsdp reshard`: the checkpoint it was made from, that one's mesh and plan
  // sha256. Null (and absent from the file) for a checkpoint a run saved.
  nlohmann::ordered_json resharded_from;
};

// Manifests keep their keys in the order written, for people reading them.
nlohmann::ordered_json rank_entry_to_json(const RankFileEntry& entry);
// Error(kUsage) naming `where` when a field is missing or of another type, or when the file is
// not a plain name in the checkpoint directory.
RankFileEntry rank_entry_from_json(const nlohmann::ordered_json& doc, const std::string& where);
// The manifest's text, with a checksum of itself.
std::string dump_manifest(const Manifest& manifest);
// `text` of the manifest at `path` (named in errors). Error(kUsage) naming the path when it is
// not JSON, of another format, has no checksum (unless kAcceptUncheckedManifest is 1) or does
// not match it, or lacks a field.
Manifest parse_manifest(const std::string& text, const std::string& path);

}  // namespace mfsdp::executor
