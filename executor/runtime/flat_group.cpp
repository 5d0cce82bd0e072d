#include "executor/runtime/flat_group.h"

#include <torch/csrc/autograd/function.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <utility>

#include "planner/torchscript/autograd_node.h"
#include "planner/torchscript/torch_model.h"
#include "schema/error.h"
#include "schema/plan_rules.h"

namespace mfsdp::executor {

// The gathered parameters as outputs of autograd nodes, for autograd's bookkeeping only (the
// context gathers and reduce-scatters): one node per parameter registration, all feeding one
// anchor node of the group. The engine runs the anchor after every parameter node of this
// backward, so the anchor completes the group's gradient. Like AccumulateGrad, both take the
// highest sequence number: the engine runs them as soon as a gradient reaches them, instead
// of after every node made later in forward (all of the unit's own computation, and for the
// root unit, the whole model), so no parameter gradient waits to be summed.
class GroupAnchorNode : public torch::autograd::Node {
 public:
  explicit GroupAnchorNode(FlatGroup* group)
      : Node(std::numeric_limits<uint64_t>::max()), group_(group) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&&) override {
    group_->complete_gradient();
    return {};
  }

 private:
  FlatGroup* group_;
};

using planner::make_node;
using planner::NodePtr;

class ParamNode : public torch::autograd::Node {
 public:
  ParamNode(FlatGroup* group, size_t param)
      : Node(std::numeric_limits<uint64_t>::max()), group_(group), param_(param) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    group_->add_gradient(param_, std::move(grads[0]));
    return {at::Tensor()};  // nothing flows on to the anchor; it only counts
  }

 private:
  FlatGroup* group_;
  size_t param_;
};

FlatGroup::FlatGroup(const schema::Group& group, const schema::Policy& policy, int64_t shard_rank,
                     void* unsharded, at::Device device)
    : group_(&group),
      storage_(planner::scalar_type_of(group.dtype)),
      compute_(planner::scalar_type_of(schema::compute_dtype(policy, group.dtype))),
      reduce_(planner::scalar_type_of(policy.reduce_dtype)),
      shard_rank_(shard_rank),
      unsharded_(unsharded),
      device_(device) {
  const auto on_device = at::TensorOptions().device(device);
  master_ = torch::zeros({group.shard_numel}, on_device.dtype(storage_));
  if (trainable()) master_.set_requires_grad(true);
  // In float32 even when gradients are reduced in bf16 or fp16: microbatches accumulate here.
  main_grad_dtype_ = planner::scalar_type_of(schema::main_grad_dtype(policy));
  if (compute_ != storage_) {
    staging_ = torch::empty({group.shard_numel}, on_device.dtype(compute_));
  }
}

at::Tensor& FlatGroup::main_grad() {
  if (!main_grad_.defined() && trainable()) {
    main_grad_ = torch::zeros({group_->shard_numel},
                              at::TensorOptions().device(device_).dtype(main_grad_dtype_));
  }
  return main_grad_;
}

int64_t FlatGroup::main_grad_bytes() const {
  return trainable()
             ? group_->shard_numel * static_cast<int64_t>(c10::elementSize(main_grad_dtype_))
             : 0;
}

bool FlatGroup::trainable() const {
  return schema::has_gradient(*group_);
}

int64_t FlatGroup::unsharded_bytes() const {
  return group_->padded_numel * c10::elementSize(compute_);
}

int64_t FlatGroup::shard_bytes_in_compute_dtype() const {
  return group_->shard_numel * c10::elementSize(compute_);
}

at::Tensor flat_slice(const at::Tensor& full, int64_t first, int64_t count) {
  if (full.is_contiguous() || full.dim() < 2) return full.reshape({-1}).narrow(0, first, count);
  const int64_t row = full.numel() / full.size(0);
  const int64_t begin = first / row, end = (first + count + row - 1) / row;
  return full.narrow(0, begin, end - begin).reshape({-1}).narrow(0, first - begin * row, count);
}

int64_t FlatGroup::load(const SliceSource& slice) {
  at::NoGradGuard no_grad;
  const int64_t begin = shard_rank_ * group_->shard_numel;
  const int64_t end = begin + group_->shard_numel;
  int64_t read = 0;
  for (size_t i = 0; i < group_->params.size(); ++i) {
    const auto& p = group_->params[i];
    // The part of this parameter that falls in this rank's shard, if any.
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    const at::Tensor part = slice(i, lo - p.offset, hi - lo);
    master_.narrow(0, lo - begin, hi - lo).copy_(part);
    read += (hi - lo) * static_cast<int64_t>(part.element_size());
  }
  return read;
}

int64_t FlatGroup::load(const std::vector<at::Tensor>& full_params) {
  // Narrowed before any conversion, so that only the slice is read (a mapped parameter's
  // other pages stay on disk).
  return load([&](size_t p, int64_t first, int64_t count) {
    return flat_slice(full_params[p], first, count);
  });
}

std::vector<at::Tensor> FlatGroup::unflatten(const at::Tensor& full_master) const {
  std::vector<at::Tensor> out;
  for (const auto& p : group_->params) {
    out.push_back(full_master.narrow(0, p.offset, p.numel).view(p.shape).clone());
  }
  return out;
}

const void* FlatGroup::gather_input() {
  if (!staging_.defined()) return master_.data_ptr();
  at::NoGradGuard no_grad;
  staging_.copy_(master_);
  return staging_.data_ptr();
}

at::Tensor FlatGroup::unsharded() const {
  return torch::from_blob(unsharded_, {group_->padded_numel}, compute_options());
}

void FlatGroup::bind(GradientHandler on_gradient, EarlyGradientHandler early) {
  on_gradient_ = std::move(on_gradient);
  on_early_ = on_gradient_ ? std::move(early) : EarlyGradientHandler();
  gradients_.assign(group_->params.size(), at::Tensor());
  pending_.assign(group_->params.size(), 0);
  anchor_.reset();
  if (on_gradient_) {
    anchor_ = make_node<GroupAnchorNode>(this);
    anchor_->add_input_metadata(at::empty({0}, master_.options()));
  }
}

at::Tensor FlatGroup::param(size_t p) {
  at::Tensor tensor = param_in_slot(p);
  if (anchor_) {
    ++pending_[p];
    NodePtr node = make_node<ParamNode>(this, p);
    node->add_next_edge(torch::autograd::Edge(anchor_, 0));
    torch::autograd::create_gradient_edge(tensor, std::move(node));
  }
  return tensor;
}

at::TensorOptions FlatGroup::compute_options() const {
  return at::TensorOptions().dtype(compute_).device(device_);
}

// A tensor of its own (not a view) over the parameter's bytes in the slot.
at::Tensor FlatGroup::param_in_slot(size_t p) const {
  const auto& layout = group_->params[p];
  void* at = static_cast<char*>(unsharded_) + layout.offset * c10::elementSize(compute_);
  return torch::from_blob(at, layout.shape, compute_options());
}

// Like AccumulateGrad, a gradient that nothing else refers to (the engine has handed it over)
// and that is a whole storage of its own is taken as it is, whatever its strides (a linear
// layer's weight gradient often comes transposed): no copy while backward holds activations.
bool FlatGroup::can_keep(const at::Tensor& grad) const {
  return grad.use_count() == 1 && !grad.requires_grad() && grad.scalar_type() == compute_ &&
         grad.device() == device_ && grad.is_non_overlapping_and_dense() &&
         grad.storage_offset() == 0 && grad.storage().nbytes() == grad.nbytes();
}

void FlatGroup::add_gradient(size_t p, at::Tensor&& grad) {
  --pending_[p];
  if (!grad.defined()) return;
  at::Tensor& sum = gradients_[p];
  if (!sum.defined()) {
    if (can_keep(grad)) {
      sum = std::move(grad);
    } else {
      sum = at::empty(group_->params[p].shape, compute_options());
      sum.copy_(grad);
    }
  } else if (!sum.is_contiguous() && grad.is_contiguous() && can_keep(grad)) {
    grad.add_(sum);  // the sum ends up contiguous, without a copy for the reduce-scatter
    sum = std::move(grad);
  } else {
    sum.add_(grad);
  }
  // A transposed sum would need a copy now, while activations are alive: it waits instead.
  if (pending_[p] > 0 && on_early_ && sum.is_contiguous() &&
      2 * group_->params[p].numel >= group_->padded_numel) {
    on_early_(p, std::move(sum));
    sum = at::Tensor();
  }
}

// The reduce-scatter reads each gradient as flat floats: one made contiguous at a time.
void FlatGroup::complete_gradient() {
  std::vector<at::Tensor> gradients = std::move(gradients_);
  gradients_.assign(group_->params.size(), at::Tensor());
  for (at::Tensor& g : gradients) {
    if (g.defined() && !g.is_contiguous()) g = g.contiguous();
  }
  if (on_gradient_) on_gradient_(std::move(gradients));
}

at::Tensor FlatGroup::flat_gradient(const std::vector<at::Tensor>& param_gradients,
                                    const at::TensorOptions& options) const {
  at::Tensor flat = at::zeros({group_->padded_numel}, options);
  for (size_t p = 0; p < param_gradients.size() && p < group_->params.size(); ++p) {
    if (!param_gradients[p].defined()) continue;
    const auto& layout = group_->params[p];
    flat.narrow(0, layout.offset, layout.numel).view(layout.shape).copy_(param_gradients[p]);
  }
  return flat;
}

void FlatGroup::release() {
  on_gradient_ = nullptr;
  on_early_ = nullptr;
  anchor_.reset();
  gradients_.clear();
}

}  // namespace mfsdp::executor
