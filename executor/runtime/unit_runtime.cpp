#include "executor/runtime/unit_runtime.h"

#include <ATen/ATen.h>

#include "schema/error.h"

namespace mfsdp::executor {

void UnitRuntime::bind(bool training,
                       const std::function<void(int g, std::vector<at::Tensor>&&)>& on_gradient,
                       const std::function<void(int g, size_t p, at::Tensor&&)>& on_early) {
  // Plans keep units called several times gathered between calls, so this is a bug if it
  // fires.
  if (bound_this_microbatch_) {
    fail(ExitCode::kInternal, "unit " + name() + " was bound twice in one microbatch");
  }
  bound_this_microbatch_ = true;
  grads_.assign(groups.size(), std::nullopt);
  grads_missing_ = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    FlatGroup& group = groups[g];
    FlatGroup::GradientHandler handler;
    FlatGroup::EarlyGradientHandler early;
    if (group.trainable() && training) {
      ++grads_missing_;
      const int index = static_cast<int>(g);
      handler = [on_gradient, index](std::vector<at::Tensor>&& grads) {
        on_gradient(index, std::move(grads));
      };
      early = [on_early, index](size_t p, at::Tensor&& gradient) {
        on_early(index, p, std::move(gradient));
      };
    }
    group.bind(std::move(handler), std::move(early));
    bind_params(bindings[g], group);
  }
  bound_ = true;
}

void UnitRuntime::unbind(const at::Device& device) {
  if (!bound_) return;
  for (size_t g = 0; g < groups.size(); ++g) {
    unbind_params(
        bindings[g],
        at::empty({0}, at::TensorOptions().dtype(groups[g].compute_dtype()).device(device)));
  }
  bound_ = false;
}

bool UnitRuntime::take_gradients(int g, std::vector<at::Tensor>&& grads) {
  if (grads_[g]) {
    fail(ExitCode::kInternal, "unit " + name() + " group " + std::to_string(g) +
                                  " received its gradient twice in one backward");
  }
  grads_[g] = std::move(grads);
  return --grads_missing_ <= 0;
}

const std::vector<at::Tensor>* UnitRuntime::gradients(size_t g) const {
  return g < grads_.size() && grads_[g] ? &*grads_[g] : nullptr;
}

void UnitRuntime::clear_gradients() {
  grads_.assign(groups.size(), std::nullopt);
}

void UnitRuntime::settle() {
  state = UnitState::kResting;
  for (auto& group : groups) group.release();
  grads_.clear();
  bound_this_microbatch_ = false;
  backward_start_us = 0;
}

}  // namespace mfsdp::executor
