#include "planner/torchscript/unit_ops.h"

#include <atomic>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "planner/torchscript/torch_model.h"
#include "planner/torchscript/unit_checkpoint.h"
#include "planner/torchscript/unit_hooks.h"
#include "schema/error.h"

namespace mfsdp::planner {

const char* const kUnitEnterOp = "mfsdp::unit_enter";
const char* const kUnitExitOp = "mfsdp::unit_exit";
const char* const kUnitCallOp = "mfsdp::unit_call";

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<UnitHooks*> installed_hooks{nullptr};

// An operator's `unit` argument, decoded (unit_ops_id).
struct Member {
  int64_t unit = -1;
  int64_t member = 0;
  int64_t members = 1;
};

Member decode(int64_t id) {
  if (id < 0) return {};
  const int64_t members = id >> 48;
  if (members == 0) return {id, 0, 1};
  return {id & 0xffffffff, (id >> 32) & 0xffff, members};
}

// The calls of merged units in progress: which of its modules have begun and ended, and
// whether the call's backward has begun. Forward runs on one thread and backward on another,
// one after the other, so one lock is never contended.
struct MergedCall {
  std::vector<bool> begun;
  int64_t ended = 0;
};
std::mutex merged_mutex;
std::map<int64_t, MergedCall> merged_calls;  // by unit
std::map<int64_t, bool> merged_backward;     // by unit: backward reported since its forward

// Whether this module beginning begins its unit's call.
bool begins_unit(const Member& m) {
  if (m.members == 1) return true;
  const std::lock_guard<std::mutex> lock(merged_mutex);
  MergedCall& call = merged_calls[m.unit];
  const bool first = call.begun.empty();
  call.begun.resize(static_cast<size_t>(m.members), false);
  if (call.begun[static_cast<size_t>(m.member)]) {
    merged_calls.erase(m.unit);
    fail(ExitCode::kModel, "a module of merged unit " + std::to_string(m.unit) +
                               " ran twice in one call of the unit; merge modules that run one "
                               "after another, once each");
  }
  call.begun[static_cast<size_t>(m.member)] = true;
  if (first) merged_backward[m.unit] = false;
  return first;
}

// Whether this module ending ends its unit's call.
bool ends_unit(const Member& m) {
  if (m.members == 1) return true;
  const std::lock_guard<std::mutex> lock(merged_mutex);
  MergedCall& call = merged_calls[m.unit];
  if (++call.ended < m.members) return false;
  merged_calls.erase(m.unit);
  return true;
}

// Whether gradients reaching this module's outputs begin its unit's backward.
bool begins_backward(const Member& m) {
  if (m.members == 1) return true;
  const std::lock_guard<std::mutex> lock(merged_mutex);
  bool& reported = merged_backward[m.unit];
  const bool first = !reported;
  reported = true;
  return first;
}

}  // namespace

int64_t unit_ops_id(int64_t unit, int64_t member, int64_t members) {
  if (unit < 0 || members <= 1) return unit;
  return unit | (member << 32) | (members << 48);
}

void forget_merged_calls() {
  const std::lock_guard<std::mutex> lock(merged_mutex);
  merged_calls.clear();
}

// Instances of a unit's class that are not units carry id -1 and report nothing.
UnitHooks* installed_hooks_for(int64_t unit) {
  return unit < 0 ? nullptr : installed_hooks.load();
}

// The caller gets new tensors on the same storage and version counter but with no autograd
// view link, so in-place ops on a unit's outputs (`x = block(x); x.relu_()`) behave as they
// do without instrumentation; a view would make each of them an autograd error. A
// checkpointed call's outputs (unit_checkpoint.cpp) are made the same way.
at::Tensor alias_of(const at::Tensor& t) {
  at::Tensor alias = t.detach();
  alias.unsafeGetTensorImpl()->set_allow_tensor_metadata_change(true);  // detach() forbids it
  return alias;
}

namespace {

UnitHooks* hooks_for(int64_t unit) {
  return installed_hooks_for(unit);
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
//
// Under mixed precision (`cast` is a scalar type, -1 for none) floating inputs are converted
// to the unit's compute dtype instead, and their gradients converted back.
struct UnitEnter : torch::autograd::Function<UnitEnter> {
  static variable_list forward(AutogradContext* ctx, int64_t, int64_t cast, at::TensorList inputs) {
    ctx->set_materialize_grads(false);
    if (cast < 0) return inputs.vec();
    std::vector<int64_t> original;
    variable_list out;
    for (const at::Tensor& t : inputs) {
      original.push_back(static_cast<int64_t>(t.scalar_type()));
      const auto target = static_cast<c10::ScalarType>(cast);
      out.push_back(t.is_floating_point() && t.scalar_type() != target ? t.to(target) : t);
    }
    ctx->saved_data["original"] = original;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (ctx->saved_data.count("original")) {
      const std::vector<int64_t> original = ctx->saved_data["original"].toIntVector();
      for (size_t i = 0; i < grads.size(); ++i) {
        const auto type = static_cast<c10::ScalarType>(original[i]);
        if (grads[i].defined() && grads[i].scalar_type() != type) grads[i] = grads[i].to(type);
      }
    }
    variable_list out = pass_through(std::move(grads));
    out.insert(out.begin() + 1, at::Tensor());  // no gradient for `cast` either
    return out;
  }
};

int64_t input_cast(UnitHooks* hooks, int64_t unit) {
  const char* dtype = hooks->input_dtype(static_cast<int>(unit));
  return dtype ? static_cast<int64_t>(scalar_type_of(dtype)) : -1;
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
    const Member m = decode(ctx->saved_data["unit"].toInt());
    if (UnitHooks* hooks = hooks_for(m.unit); hooks && begins_backward(m)) {
      hooks->pre_backward(static_cast<int>(m.unit));
    }
    return pass_through(std::move(grads));
  }
};

// Floating inputs cast to the unit's compute dtype (`cast` >= 0) outside autograd.
std::vector<at::Tensor> cast_plainly(at::TensorList inputs, int64_t cast) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : inputs) {
    out.push_back(cast >= 0 && t.is_floating_point() ? t.to(static_cast<c10::ScalarType>(cast))
                                                     : t);
  }
  return out;
}

// A recompute (unit_checkpoint.h) re-runs the unit's forward: no hooks, the same cast.
std::vector<at::Tensor> unit_enter_autograd(int64_t id, at::TensorList inputs) {
  const Member m = decode(id);
  const int64_t unit = m.unit;
  UnitHooks* hooks = hooks_for(unit);
  if (!hooks) return inputs.vec();
  if (checkpoint::recomputing(unit)) return UnitEnter::apply(unit, input_cast(hooks, unit), inputs);
  if (begins_unit(m)) hooks->pre_forward(static_cast<int>(unit));
  // A checkpointed call's forward runs without autograd, casts included.
  if (checkpoint::begin(unit)) return cast_plainly(inputs, input_cast(hooks, unit));
  return UnitEnter::apply(unit, input_cast(hooks, unit), inputs);
}

// unit_exit under either kernel: a recompute's outputs are captured; a checkpointed call's
// get its recompute node; any other's go through `exit_normally`. Then post_forward.
template <typename ExitNormally>
std::vector<at::Tensor> exit_unit(int64_t id, at::TensorList outputs, ExitNormally exit_normally) {
  const Member m = decode(id);
  const int64_t unit = m.unit;
  UnitHooks* hooks = hooks_for(unit);
  if (!hooks) return outputs.vec();
  if (checkpoint::recomputing(unit)) {
    checkpoint::capture(unit, outputs);
    return outputs.vec();
  }
  std::optional<std::vector<at::Tensor>> linked = checkpoint::end(unit, outputs);
  std::vector<at::Tensor> out = linked ? std::move(*linked) : exit_normally();
  if (ends_unit(m)) hooks->post_forward(static_cast<int>(unit));
  return out;
}

std::vector<at::Tensor> unit_exit_autograd(int64_t unit, at::TensorList outputs) {
  return exit_unit(unit, outputs, [&] { return UnitExit::apply(unit, outputs); });
}

// Below autograd: an empty list (no tensor to dispatch on) or inference mode. Nothing can
// flow backward, so the tensors pass as they are.
std::vector<at::Tensor> unit_enter_plain(int64_t id, at::TensorList inputs) {
  const Member m = decode(id);
  const int64_t unit = m.unit;
  UnitHooks* hooks = hooks_for(unit);
  if (!hooks) return inputs.vec();
  if (!checkpoint::recomputing(unit)) {
    if (begins_unit(m)) hooks->pre_forward(static_cast<int>(unit));
    checkpoint::begin(unit);
  }
  return cast_plainly(inputs, input_cast(hooks, unit));
}

std::vector<at::Tensor> unit_exit_plain(int64_t unit, at::TensorList outputs) {
  return exit_unit(unit, outputs, [&] { return outputs.vec(); });
}

// Ahead of unit_enter in the forward of a class with a checkpointed unit: the call's module
// and arguments, for the recompute.
void unit_call(int64_t id, const c10::IValue& self, const c10::IValue& args) {
  const int64_t unit = decode(id).unit;
  if (UnitHooks* hooks = hooks_for(unit)) checkpoint::on_call(*hooks, unit, self, args);
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
  m.def(torch::schema("mfsdp::unit_call(int unit, Any self, Any args) -> ()",
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
  m.impl("unit_call", TORCH_FN(mfsdp::planner::unit_call));
}
