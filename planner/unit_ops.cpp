#include "planner/unit_ops.h"

#include <atomic>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "planner/unit_hooks.h"

namespace mfsdp::planner {

const char* const kUnitEnterOp = "mfsdp::unit_enter";
const char* const kUnitExitOp = "mfsdp::unit_exit";

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<UnitHooks*> installed_hooks{nullptr};

// Instances of a unit's class that are not units carry id -1 and report nothing.
UnitHooks* hooks_for(int64_t unit) {
  return unit < 0 ? nullptr : installed_hooks.load();
}

// Backward returns one gradient per forward argument: none for the unit id, then the
// tensors' gradients unchanged (undefined ones stay undefined: materialize_grads is off).
variable_list pass_through(variable_list grads) {
  variable_list out;
  out.reserve(grads.size() + 1);
  out.emplace_back();
  for (auto& g : grads) out.push_back(std::move(g));
  return out;
}

// Returns its inputs as they are; autograd then hands the unit views of them with this node
// as grad_fn. An in-place op on such a view inside the unit is an autograd error, which is
// better than the silent alternative: an alias whose in-place change the caller's tensor
// would see in its data but not in its gradient.
struct UnitEnter : torch::autograd::Function<UnitEnter> {
  static variable_list forward(AutogradContext* ctx, int64_t, at::TensorList inputs) {
    ctx->set_materialize_grads(false);
    return inputs.vec();
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return pass_through(std::move(grads));
  }
};

// The caller gets new tensors on the same storage and version counter but with no autograd
// view link, so in-place ops on a unit's outputs (`x = block(x); x.relu_()`) behave as they
// do without instrumentation; a view would make each of them an autograd error.
at::Tensor alias_of(const at::Tensor& t) {
  at::Tensor alias = t.detach();
  alias.unsafeGetTensorImpl()->set_allow_tensor_metadata_change(true);  // detach() forbids it
  return alias;
}

struct UnitExit : torch::autograd::Function<UnitExit> {
  static variable_list forward(AutogradContext* ctx, int64_t unit, at::TensorList outputs) {
    ctx->set_materialize_grads(false);
    ctx->saved_data["unit"] = unit;
    variable_list aliases;
    aliases.reserve(outputs.size());
    for (const at::Tensor& t : outputs) aliases.push_back(alias_of(t));
    return aliases;
  }
  // One node for all outputs: the engine runs it once, when every output's gradient is in.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t unit = ctx->saved_data["unit"].toInt();
    if (UnitHooks* hooks = hooks_for(unit)) hooks->pre_backward(static_cast<int>(unit));
    return pass_through(std::move(grads));
  }
};

std::vector<at::Tensor> unit_enter_autograd(int64_t unit, at::TensorList inputs) {
  UnitHooks* hooks = hooks_for(unit);
  if (!hooks) return inputs.vec();
  hooks->pre_forward(static_cast<int>(unit));
  return UnitEnter::apply(unit, inputs);
}

std::vector<at::Tensor> unit_exit_autograd(int64_t unit, at::TensorList outputs) {
  UnitHooks* hooks = hooks_for(unit);
  if (!hooks) return outputs.vec();
  std::vector<at::Tensor> aliases = UnitExit::apply(unit, outputs);
  hooks->post_forward(static_cast<int>(unit));
  return aliases;
}

// Below autograd: an empty list (no tensor to dispatch on) or inference mode. Nothing can
// flow backward, so the tensors pass as they are.
std::vector<at::Tensor> unit_enter_plain(int64_t unit, at::TensorList inputs) {
  if (UnitHooks* hooks = hooks_for(unit)) hooks->pre_forward(static_cast<int>(unit));
  return inputs.vec();
}

std::vector<at::Tensor> unit_exit_plain(int64_t unit, at::TensorList outputs) {
  if (UnitHooks* hooks = hooks_for(unit)) hooks->post_forward(static_cast<int>(unit));
  return outputs.vec();
}

}  // namespace

UnitHooks* set_unit_hooks(UnitHooks* hooks) {
  return installed_hooks.exchange(hooks);
}

}  // namespace mfsdp::planner

// A fragment, so other files may add operators to the mfsdp namespace. CONSERVATIVE alias
// analysis marks the calls as having side effects: the graph executor's dead-code
// elimination, constant propagation and reordering passes leave them where they are.
TORCH_LIBRARY_FRAGMENT(mfsdp, m) {
  m.def(torch::schema("mfsdp::unit_enter(int unit, Tensor[] inputs) -> Tensor[]",
                      c10::AliasAnalysisKind::CONSERVATIVE));
  m.def(torch::schema("mfsdp::unit_exit(int unit, Tensor[] outputs) -> Tensor[]",
                      c10::AliasAnalysisKind::CONSERVATIVE));
}

TORCH_LIBRARY_IMPL(mfsdp, Autograd, m) {
  m.impl("unit_enter", TORCH_FN(mfsdp::planner::unit_enter_autograd));
  m.impl("unit_exit", TORCH_FN(mfsdp::planner::unit_exit_autograd));
}

// CompositeExplicitAutograd also covers the Undefined key an empty Tensor[] dispatches to.
TORCH_LIBRARY_IMPL(mfsdp, CompositeExplicitAutograd, m) {
  m.impl("unit_enter", TORCH_FN(mfsdp::planner::unit_enter_plain));
  m.impl("unit_exit", TORCH_FN(mfsdp::planner::unit_exit_plain));
}
