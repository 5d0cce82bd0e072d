#pragma once
// A checkpoint directory as saving and loading see it: which step-N directories in it are
// complete checkpoints, and the hidden temp names of everything that is not. checkpoint.h's
// checkpoint_name(), latest_checkpoint() and find_latest_checkpoint() are defined beside it.
// No LibTorch.

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace mfsdp::executor {

struct FoundCheckpoint {
  int64_t step = 0;
  std::filesystem::path path;
};

// Hidden names for everything that is not (or no longer) a complete checkpoint: a save in
// progress, a checkpoint being replaced or pruned. Only a leftover of a crash outlives a save.
std::string temp_name(int64_t step, const std::string& why);
bool is_temp_name(const std::string& name);

// Complete checkpoints under `dir`, oldest first: step-N directories whose manifest reads
// and names step N. The others, with why, go to `incomplete` when given.
std::vector<FoundCheckpoint> complete_checkpoints(
    const std::filesystem::path& dir,
    std::vector<std::pair<FoundCheckpoint, std::string>>* incomplete = nullptr);

}  // namespace mfsdp::executor
