#pragma once
// One (dtype, requires_grad) group of a unit at run time: the rank's sharded master slice,
// its sharded main gradient, and the unsharded flat buffer that lives in the unit's slot.
// Parameters are tensors over that buffer; their gradients arrive per parameter, and the
// reduce-scatter reads them where they lie as the pieces of one flat gradient.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/autograd/edge.h>
#include <torch/script.h>

#include "schema/plan.h"

namespace mfsdp::executor {

// Elements [first, first + count) of `full` in row-major order, as a 1-D tensor: a view when
// `full` is contiguous, else a copy of only the rows of its first dimension that hold them (a
// transposed view reads the columns it needs, not the whole tensor).
at::Tensor flat_slice(const at::Tensor& full, int64_t first, int64_t count);

class FlatGroup {
 public:
  // `unsharded` points at this group's bytes inside the unit's slot, in `device`'s memory;
  // the master shard and main gradient are allocated there too.
  FlatGroup(const schema::Group& group, const schema::Policy& policy, int64_t shard_rank,
            void* unsharded, at::Device device = at::kCPU);

  const schema::Group& layout() const { return *group_; }
  bool trainable() const;
  c10::ScalarType compute_dtype() const { return compute_; }
  // Gradients are reduce-scattered in this dtype; main_grad() is schema::main_grad_dtype.
  c10::ScalarType reduce_dtype() const { return reduce_; }
  int64_t unsharded_bytes() const;
  int64_t shard_bytes_in_compute_dtype() const;

  // Fills the master shard slice by slice: `slice(p, first, count)` gives `count` elements of
  // parameter p (layout order) from element `first` of its values in row-major order, in any
  // dtype (converted); returns the bytes it gave. Only the slices in this rank's shard are
  // asked for.
  using SliceSource = std::function<at::Tensor(size_t p, int64_t first, int64_t count)>;
  int64_t load(const SliceSource& slice);
  // The same from the full parameter values, given in layout order, reading only the slices
  // that fall in the shard (flat_slice).
  int64_t load(const std::vector<at::Tensor>& full_params);
  // The full parameter values from an unsharded buffer holding every rank's master shard
  // (as gathered by a full-state all-gather), in layout order.
  std::vector<at::Tensor> unflatten(const at::Tensor& full_master) const;

  // Persistent per-rank state.
  at::Tensor& master() { return master_; }
  const at::Tensor& master() const { return master_; }
  // Allocated (zeroed) at the first call, on the compute thread: Context does it when the
  // first microbatch begins, so set-up touches no gradient page (docs/large-models.md).
  at::Tensor& main_grad();
  int64_t main_grad_bytes() const;  // what main_grad() holds or will hold; 0 if frozen

  // What this rank sends in the all-gather: the master shard in the compute dtype.
  const void* gather_input();
  // The unsharded buffer in the slot, as a tensor (no ownership).
  at::Tensor unsharded() const;
  // Binding the gathered parameters for one forward. bind() starts it; param() then gives a
  // tensor over parameter `p`'s bytes in the slot, a new one for every registration of the
  // parameter (tied weights have several). Without `on_gradient` (frozen groups, grad mode
  // off) these are plain tensors. With it, each is the output of its own autograd node, and
  // once every node that ran in backward has, `on_gradient` gets the group's gradient: per
  // parameter (layout order) the sum of its registrations' gradients, contiguous, in the
  // compute dtype; undefined where none arrived. The first gradient of a parameter is kept
  // as autograd made it when nothing else refers to it; later ones are added to it. No
  // flat copy of the group, no autograd sum of a tied weight's uses and no leaf's .grad is
  // ever materialised beside them.
  //
  // With `early`, a parameter registered more than once (a tied weight) whose gradient so
  // far is at least half of the group is handed to `early` (contiguous, compute dtype) as
  // soon as it is summed while further uses are still to deliver theirs, instead of waiting
  // beside the next use's gradient; on_gradient then gets only what arrived after it. The
  // caller reduce-scatters it at once: at most twice the group's traffic, to free as many
  // bytes as the parameter has for the rest of backward.
  using GradientHandler = std::function<void(std::vector<at::Tensor>&& param_gradients)>;
  using EarlyGradientHandler = std::function<void(size_t p, at::Tensor&& gradient)>;
  void bind(GradientHandler on_gradient = {}, EarlyGradientHandler early = {});
  at::Tensor param(size_t p);
  void release();
  // A group's gradient as on_gradient gets it, as one flat tensor of padded_numel elements in
  // `options` (zeros between and where no gradient arrived), for collectives that need one.
  at::Tensor flat_gradient(const std::vector<at::Tensor>& param_gradients,
                           const at::TensorOptions& options) const;

 private:
  const schema::Group* group_;
  c10::ScalarType storage_;
  c10::ScalarType compute_;
  c10::ScalarType reduce_;
  c10::ScalarType main_grad_dtype_;
  int64_t shard_rank_;
  void* unsharded_;
  at::Device device_;
  at::Tensor master_;
  at::Tensor main_grad_;
  at::Tensor staging_;  // master cast to the compute dtype when the two differ
  GradientHandler on_gradient_;
  EarlyGradientHandler on_early_;
  // Every parameter node feeds it; it completes. (LibTorch 1.13 holds nodes in shared_ptrs,
  // newer versions in intrusive_ptrs: whichever an Edge holds.)
  decltype(torch::autograd::Edge::function) anchor_;
  std::vector<at::Tensor> gradients_;  // per parameter, being summed in this backward
  std::vector<int> pending_;           // per parameter, registrations yet to deliver

  at::TensorOptions compute_options() const;  // the compute dtype on this group's device
  at::Tensor param_in_slot(size_t p) const;
  bool can_keep(const at::Tensor& grad) const;
  void add_gradient(size_t p, at::Tensor&& grad);
  void complete_gradient();
  friend class GroupAnchorNode;
  friend class ParamNode;
};

}  // namespace mfsdp::executor
