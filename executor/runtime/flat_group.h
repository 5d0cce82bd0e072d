#pragma once
// One (dtype, requires_grad) group of a unit at run time: the rank's sharded master slice,
// its sharded main gradient, and the unsharded flat buffer that lives in the unit's slot.
// Parameters are views into an autograd leaf over that buffer, so gradients of all of the
// group's parameters arrive as one flat tensor.

#include <cstdint>
#include <string>
#include <vector>

#include <torch/script.h>

#include "schema/plan.h"

namespace mfsdp::executor {

class FlatGroup {
 public:
  // `unsharded` points at this group's bytes inside the unit's slot, in `device`'s memory;
  // the master shard and main gradient are allocated there too.
  FlatGroup(const schema::Group& group, const schema::Policy& policy, int64_t shard_rank,
            void* unsharded, at::Device device = at::kCPU);

  const schema::Group& layout() const { return *group_; }
  bool trainable() const;
  c10::ScalarType compute_dtype() const { return compute_; }
  int64_t unsharded_bytes() const;
  int64_t shard_bytes_in_compute_dtype() const;

  // Fills the master shard from the full parameter values, given in layout order.
  void load(const std::vector<at::Tensor>& full_params);
  // The full parameter values from an unsharded buffer holding every rank's master shard
  // (as gathered by a full-state all-gather), in layout order.
  std::vector<at::Tensor> unflatten(const at::Tensor& full_master) const;

  // Persistent per-rank state.
  at::Tensor& master() { return master_; }
  const at::Tensor& master() const { return master_; }
  at::Tensor& main_grad() { return main_grad_; }
  const at::Tensor& main_grad() const { return main_grad_; }

  // What this rank sends in the all-gather: the master shard in the compute dtype.
  const void* gather_input();
  // The unsharded buffer in the slot, as a tensor (no ownership).
  at::Tensor unsharded() const;
  // A fresh autograd leaf over the unsharded buffer and one view per parameter.
  void bind(std::vector<at::Tensor>& views);
  at::Tensor& leaf() { return leaf_; }
  void release();

 private:
  const schema::Group* group_;
  c10::ScalarType storage_;
  c10::ScalarType compute_;
  c10::ScalarType reduce_;
  int64_t shard_rank_;
  void* unsharded_;
  at::Device device_;
  at::Tensor master_;
  at::Tensor main_grad_;
  at::Tensor staging_;  // master cast to the compute dtype when the two differ
  at::Tensor leaf_;
};

}  // namespace mfsdp::executor
