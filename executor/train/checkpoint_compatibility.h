#pragma once
// Whether this run may resume a checkpoint: the same world size, mesh, plan (by its sha256)
// and optimizer kind, or a refusal that says which differs and how to resume it. No LibTorch
// in this header.

#include <string>

#include "executor/train/manifest.h"

namespace mfsdp::executor {

class Context;
class ShardedOptimizer;

// Throws Error(kUsage) naming `checkpoint`, what differs, and the plan to resume it with.
void check_compatible(const Manifest& manifest, Context& context, const ShardedOptimizer& optimizer,
                      const std::string& checkpoint);

}  // namespace mfsdp::executor
