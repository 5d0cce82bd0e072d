#pragma once
// --resume of `mfsdp run`: which checkpoint a run continues from, and what it says about the
// newer ones it passes over. No LibTorch in this header.

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

namespace mfsdp::executor {

class Context;
class ShardedOptimizer;
struct TrainConfig;

// --resume: the checkpoint --resume names (config.resume_from), else the newest complete one
// under --checkpoint-dir; none when there is none yet. Newer damaged checkpoints are passed
// over with a warning (printed when `lead`), never silently; a directory with only damaged
// ones is an error. Found before the context is made, which then need not read the model's
// values (a skeleton needs none).
std::optional<std::string> checkpoint_to_resume(const TrainConfig& config, bool lead);

// The step of `checkpoint`, loaded into the context and optimizer and resharded when it is
// another plan's (0 when there is none). Collective (every rank loads its part); only `lead`
// prints, to `out`.
int64_t resume(const TrainConfig& config, const std::optional<std::string>& checkpoint,
               Context& context, ShardedOptimizer& optimizer, bool lead, std::ostream& out);

}  // namespace mfsdp::executor
