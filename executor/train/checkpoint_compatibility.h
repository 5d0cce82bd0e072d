#pragma once
// Whether this run may resume a checkpoint, and how: its own plan (loaded as saved) or another
// plan of the same model (resharded), or a refusal that says what differs and how to resume
// it. No LibTorch in this header.

#include <string>

#include "executor/train/manifest.h"

namespace mfsdp::executor {

class Context;
class ShardedOptimizer;

// Error(kUsage) naming `checkpoint` when its optimizer kind is not `optimizer_kind` or its
// model's structural hash is not `structural_hash`, with what to resume it with: the two
// things no plan can map.
void check_same_model_and_optimizer(const Manifest& manifest, const std::string& checkpoint,
                                    const std::string& structural_hash,
                                    const std::string& optimizer_kind);

enum class CheckpointFit {
  kSamePlan,  // saved under this run's plan (same sha256): loaded file for file
  kReshard,   // saved under another plan of the same model: laid out anew (reshard.h)
};

// Throws Error(kUsage) naming `checkpoint` for an optimizer of another kind or a model of
// another structure, with what to resume it with.
CheckpointFit check_compatible(const Manifest& manifest, Context& context,
                               const ShardedOptimizer& optimizer, const std::string& checkpoint);

}  // namespace mfsdp::executor
