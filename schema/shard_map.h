#pragma once
// Where each element of one rank's master shards under a plan comes from in a checkpoint
// saved under another plan of the same model: the arithmetic of resharding (docs/checkpoints.md
// "Resuming under another plan"). Parameters are matched by name (or tied alias), so world size,
// mesh, unit set, alignment and group order may all differ. No LibTorch: the executor applies
// the copies to tensors.

#include <cstdint>
#include <string>
#include <vector>

#include "schema/plan.h"

namespace mfsdp::schema {

// A run of elements copied from a saved shard to a target shard. Groups are numbered by their
// position among the plan's trainable groups (units in plan order, groups in unit order): the
// order of shard names in rank files and of the executor's master shards.
struct ShardCopy {
  size_t to_group = 0;      // trainable group of the target plan
  int64_t to_offset = 0;    // element offset in the target rank's shard of it
  size_t from_group = 0;    // trainable group of the saved plan
  int64_t from_shard = 0;   // shard rank holding the elements under the saved plan
  int64_t from_offset = 0;  // element offset in that shard
  int64_t numel = 0;
};

// The copies that fill shard rank `target_shard` of every trainable group of `target` from
// `saved`'s shards, ordered by (from_shard, from_group, from_offset) so each saved shard rank is
// read once, adjacent runs merged. Elements no copy covers (alignment gaps, padding) are zero.
// Throws Error(kUsage) naming the parameter when a trainable parameter of `target` has no
// trainable counterpart in `saved`, or one of another shape or dtype.
std::vector<ShardCopy> shard_copies(const Plan& saved, const Plan& target, int64_t target_shard);

// The shard ranks of `saved` that `copies` read, ascending.
std::vector<int64_t> saved_shards_read(const std::vector<ShardCopy>& copies);

// Element counts of the trainable groups' shards, in trainable-group order.
std::vector<int64_t> trainable_shard_numels(const Plan& plan);

}  // namespace mfsdp::schema
