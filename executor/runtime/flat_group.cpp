#include "executor/runtime/flat_group.h"

#include "planner/torch_model.h"
#include "schema/error.h"
#include "schema/plan_rules.h"

namespace mfsdp::executor {

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
  if (trainable()) {
    master_.set_requires_grad(true);
    main_grad_ = torch::zeros({group.shard_numel}, on_device.dtype(reduce_));
  }
  if (compute_ != storage_) {
    staging_ = torch::empty({group.shard_numel}, on_device.dtype(compute_));
  }
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

void FlatGroup::load(const std::vector<at::Tensor>& full_params) {
  at::NoGradGuard no_grad;
  const int64_t begin = shard_rank_ * group_->shard_numel;
  const int64_t end = begin + group_->shard_numel;
  for (size_t i = 0; i < group_->params.size(); ++i) {
    const auto& p = group_->params[i];
    // The part of this parameter that falls in this rank's shard, if any.
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    const at::Tensor flat = full_params[i].reshape({-1}).to(storage_);
    master_.narrow(0, lo - begin, hi - lo).copy_(flat.narrow(0, lo - p.offset, hi - lo));
  }
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
  return torch::from_blob(unsharded_, {group_->padded_numel},
                          at::TensorOptions().dtype(compute_).device(device_));
}

void FlatGroup::bind(std::vector<at::Tensor>& views) {
  leaf_ = unsharded().detach();
  if (trainable()) leaf_.set_requires_grad(true);
  // One split for all parameters (and the gaps between them), so backward concatenates the
  // parameter gradients into one flat gradient instead of materialising one per parameter.
  std::vector<int64_t> sizes;
  std::vector<int> piece_of_param;
  int64_t at = 0;
  for (const auto& p : group_->params) {
    if (p.offset > at) sizes.push_back(p.offset - at);
    piece_of_param.push_back(static_cast<int>(sizes.size()));
    sizes.push_back(p.numel);
    at = p.offset + p.numel;
  }
  if (group_->padded_numel > at) sizes.push_back(group_->padded_numel - at);
  const std::vector<at::Tensor> pieces = leaf_.split_with_sizes(sizes);
  views.clear();
  for (size_t i = 0; i < group_->params.size(); ++i) {
    views.push_back(pieces[piece_of_param[i]].view(group_->params[i].shape));
  }
}

void FlatGroup::release() {
  leaf_ = at::Tensor();
}

}  // namespace mfsdp::executor
