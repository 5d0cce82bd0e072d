#pragma once
// --resume of `mfsdp run`: which checkpoint a run continues from, and what it says about the
// newer ones it passes over. No LibTorch in this header.

#include <cstdint>
#include <ostream>

namespace mfsdp::executor {

class Context;
class ShardedOptimizer;
struct TrainConfig;

// --resume: the step of the checkpoint --resume names (config.resume_from), else of the
// newest complete one under --checkpoint-dir, loaded into the context and optimizer and
// resharded when it is another plan's (0 when there is none yet). Newer damaged checkpoints
// are passed over with a warning, never silently; a directory with only damaged ones is an
// error. Collective (every rank loads its part); only `lead` prints, to `out` and std::cerr.
int64_t resume(const TrainConfig& config, Context& context, ShardedOptimizer& optimizer, bool lead,
               std::ostream& out);

}  // namespace mfsdp::executor
