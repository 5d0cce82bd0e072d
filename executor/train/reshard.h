#pragma once
// Checkpoints across plans: a checkpoint saved under one plan of a model, laid out for another
// plan of the same model (another world size, mesh, unit set, alignment or schedule). Used
// by load_checkpoint when the run's plan is not the checkpoint's, and by `mfsdp reshard` to
// convert a checkpoint offline. What it guarantees: docs/checkpoints.md#resharding.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "executor/train/manifest.h"
#include "executor/train/optimizer_state.h"
#include "schema/plan.h"

namespace mfsdp::executor {

// A checkpoint's manifest and its plan.json, read and checked.
struct SavedCheckpoint {
  std::string path;
  Manifest manifest;
  schema::Plan plan;
};
SavedCheckpoint open_checkpoint(const std::string& checkpoint);

// Error(kUsage), naming the checkpoint, when its state cannot be laid out for `target`: another
// model (structural hash), or an optimizer of another kind than `optimizer_kind`.
void check_reshardable(const SavedCheckpoint& saved, const schema::Plan& target,
                       const std::string& optimizer_kind);

// One rank's state under the target plan, on the CPU.
struct ReshardedRank {
  std::vector<at::Tensor> shards;  // the target's trainable groups, plan order, zero padded
  // Per shard; all empty when the checkpoint has no optimizer state (saved before a step).
  std::vector<std::optional<ParamOptimizerState>> optimizer;
  std::vector<std::string> buffer_names;
  std::vector<at::Tensor> buffers;
  at::Tensor rng_state;
  at::Tensor device_rng_state;  // undefined when the source rank trained on the CPU
  int64_t source_rank = 0;      // the saved rank whose buffers and generators it got
};

// `rank`'s state under `target`: its master shards and elementwise optimizer state cut from
// the saved shards by schema::shard_copies, reading the saved replica 0's rank files one at a
// time (each checked against the manifest and the saved plan); buffers and generator states
// of saved rank `rank`, or of rank 0 for a rank the saved run did not have.
ReshardedRank reshard_rank(const SavedCheckpoint& saved, const schema::Plan& target, int64_t rank);

// "2 ranks as shard 2 x replicate 1, plan 5b0c3e1a9d2f": how resume and reshard name a layout.
std::string describe_layout(const schema::Mesh& mesh, const std::string& plan_sha256);

struct ReshardSummary {
  std::string from;  // the checkpoint read
  std::string to;    // the checkpoint written: out_dir/step-NNNNNNNN
  int64_t step = 0;
  std::string from_layout, to_layout;  // describe_layout of each
};

// `mfsdp reshard`: writes `checkpoint` (a step directory, or the newest complete one of a
// directory of them) laid out for the plan at `plan_path` as out_dir/step-NNNNNNNN, one rank
// file at a time, through a temp directory renamed into place. Refuses (kUsage) what
// check_reshardable refuses and an existing out_dir/step-NNNNNNNN; kIo when it cannot write.
ReshardSummary reshard_checkpoint(const std::string& checkpoint, const std::string& plan_path,
                                  const std::string& out_dir);

}  // namespace mfsdp::executor
