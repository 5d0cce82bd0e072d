#include "planner/torchscript/unit_checkpoint.h"
#include "planner/torchscript/unit_ops.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>

#include "planner/torchscript/autograd_node.h"
#include "schema/error.h"

namespace mfsdp::planner {

// unit_ops.cpp: the hooks installed now, nullptr for an instance that is not a unit; and what
// a unit's caller gets for each output tensor.
UnitHooks* installed_hooks_for(int64_t unit);
at::Tensor alias_of(const at::Tensor& t);

namespace checkpoint {
namespace {

// --- Values holding tensors -------------------------------------------------------------
// A unit's arguments are tensors, tensor-free values, or lists, tuples and optionals of
// tensors (instrument_units refuses other types for a checkpointed unit).
void each_tensor(const c10::IValue& v, const std::function<void(const at::Tensor&)>& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTuple()) {
    for (const c10::IValue& e : v.toTupleRef().elements()) each_tensor(e, f);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) each_tensor(e, f);
  }
}

c10::IValue map_tensors(const c10::IValue& v,
                        const std::function<at::Tensor(const at::Tensor&)>& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const c10::IValue& e : v.toTupleRef().elements()) elements.push_back(map_tensors(e, f));
    auto type = v.type()->cast<c10::TupleType>();
    if (type && type->schema()) return c10::ivalue::Tuple::createNamed(std::move(elements), type);
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorVector()) out.push_back(f(t));
    return out;
  }
  if (v.isList()) {
    c10::impl::GenericList out(v.toList().elementType());
    for (const c10::IValue& e : v.toListRef()) out.push_back(map_tensors(e, f));
    return out;
  }
  return v;
}

// A tensor for the recompute to differentiate: the same data, no history.
at::Tensor leaf_of(const at::Tensor& t) {
  at::Tensor leaf = t.detach();
  if (t.requires_grad()) leaf.requires_grad_(true);
  return leaf;
}

// --- RNG --------------------------------------------------------------------------------
// The generators the call may draw from: the CPU's, and each CUDA device's its tensors are on.
struct RngStates {
  at::Tensor cpu;
  std::vector<std::pair<c10::Device, at::Tensor>> devices;
};

at::Generator generator_of(const c10::Device& device) {
  return device.is_cpu() ? at::detail::getDefaultCPUGenerator()
                         : at::globalContext().defaultGenerator(device);
}

at::Tensor state_of(const c10::Device& device) {
  at::Generator gen = generator_of(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_state(const c10::Device& device, const at::Tensor& state) {
  at::Generator gen = generator_of(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

RngStates capture_rng(const std::vector<c10::Device>& devices) {
  RngStates states{state_of(at::kCPU), {}};
  for (const c10::Device& d : devices) states.devices.emplace_back(d, state_of(d));
  return states;
}

void restore_rng(const RngStates& states) {
  set_state(at::kCPU, states.cpu);
  for (const auto& [device, state] : states.devices) set_state(device, state);
}

// --- A checkpointed call ------------------------------------------------------------------
// A parameter slot of a module in the unit, and the tensor forward read there.
struct ParamSlot {
  c10::intrusive_ptr<c10::ivalue::Object> module;
  size_t slot = 0;
  at::Tensor value;
};

struct Call {
  int64_t unit = -1;
  c10::IValue self;                // the unit's module
  c10::IValue args;                // a tuple, forward's arguments after self
  std::vector<at::Tensor> inputs;  // the tensors in args that require grad, in order
  std::vector<int64_t> versions;   // their versions when forward read them
  std::vector<ParamSlot> params;   // those that require grad
  RngStates rng;
  bool grad_was_enabled = true;
};

struct Pending {
  int64_t unit = -1;
  c10::IValue self, args;
};

thread_local std::optional<Pending> pending;
thread_local std::vector<std::shared_ptr<Call>> open_calls;

// A recompute in progress on this thread: the unit, and the outputs its unit_exit captured.
struct Recompute {
  int64_t unit = -1;
  std::optional<std::vector<at::Tensor>> outputs;
};
thread_local std::vector<Recompute*> recomputes;

std::vector<ParamSlot> params_of(const torch::jit::Module& unit) {
  std::vector<ParamSlot> params;
  for (const torch::jit::Module& m : unit.modules()) {
    const c10::ClassTypePtr& type = m.type();
    for (size_t i = 0; i < type->numAttributes(); ++i) {
      if (!type->is_parameter(i)) continue;
      const c10::IValue& value = m._ivalue()->getSlot(i);
      if (value.isTensor() && value.toTensor().requires_grad()) {
        params.push_back({m._ivalue(), i, value.toTensor()});
      }
    }
  }
  return params;
}

// Sets each slot to a leaf over what forward read there for the recompute, and back after.
class SwappedParams {
 public:
  explicit SwappedParams(const std::vector<ParamSlot>& params) : params_(params) {
    for (const ParamSlot& p : params_) {
      before_.push_back(p.module->getSlot(p.slot));
      leaves_.push_back(leaf_of(p.value));
      p.module->setSlot(p.slot, leaves_.back());
    }
  }
  ~SwappedParams() {
    for (size_t i = 0; i < params_.size(); ++i) {
      params_[i].module->setSlot(params_[i].slot, before_[i]);
    }
  }
  SwappedParams(const SwappedParams&) = delete;
  SwappedParams& operator=(const SwappedParams&) = delete;
  const std::vector<at::Tensor>& leaves() const { return leaves_; }

 private:
  const std::vector<ParamSlot>& params_;
  std::vector<c10::IValue> before_;
  std::vector<at::Tensor> leaves_;
};

// The RNG as forward left it at the call's entry for the recompute, the current one after.
class ForkedRng {
 public:
  explicit ForkedRng(const RngStates& at_entry) {
    std::vector<c10::Device> devices;
    for (const auto& d : at_entry.devices) devices.push_back(d.first);
    now_ = capture_rng(devices);
    restore_rng(at_entry);
  }
  ~ForkedRng() { restore_rng(now_); }
  ForkedRng(const ForkedRng&) = delete;
  ForkedRng& operator=(const ForkedRng&) = delete;

 private:
  RngStates now_;
};

class ActiveRecompute {
 public:
  explicit ActiveRecompute(Recompute& r) { recomputes.push_back(&r); }
  ~ActiveRecompute() { recomputes.pop_back(); }
  ActiveRecompute(const ActiveRecompute&) = delete;
  ActiveRecompute& operator=(const ActiveRecompute&) = delete;
};

std::string unit_label(const Call& call) {
  const auto type = call.self.type()->cast<c10::ClassType>();
  return "checkpointed unit " + std::to_string(call.unit) +
         (type && type->name() ? " (" + type->name()->name() + ")" : "");
}

// The outputs' node: its inputs are the call's outputs that can have gradients, its next
// edges those of the call's inputs, then of its parameters.
class RecomputeNode : public torch::autograd::Node {
 public:
  RecomputeNode(std::shared_ptr<Call> call, std::vector<size_t> differentiable)
      : call_(std::move(call)), differentiable_(std::move(differentiable)) {}

  std::string name() const override { return "mfsdp::RecomputeBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (!call_) {
      fail(ExitCode::kUsage,
           "backward ran twice through a checkpointed unit's outputs; its recompute was "
           "released after the first (retain_graph keeps it)");
    }
    const Call& call = *call_;
    if (UnitHooks* hooks = installed_hooks_for(call.unit)) {
      hooks->pre_backward(static_cast<int>(call.unit));
    }
    for (size_t i = 0; i < call.inputs.size(); ++i) {
      if (call.inputs[i]._version() != call.versions[i]) {
        fail(ExitCode::kRuntime, unit_label(call) +
                                     ": an input of its forward was modified in place before "
                                     "backward, so recomputing the forward would differentiate "
                                     "other values; clone it before the in-place change, or do not "
                                     "checkpoint this unit");
      }
    }
    std::vector<c10::IValue> args;
    std::vector<at::Tensor> wrt;
    for (const c10::IValue& a : call.args.toTupleRef().elements()) {
      args.push_back(map_tensors(a, [&](const at::Tensor& t) {
        at::Tensor leaf = leaf_of(t);
        if (leaf.requires_grad()) wrt.push_back(leaf);
        return leaf;
      }));
    }
    Recompute recompute{call.unit, std::nullopt};
    {
      at::AutoGradMode grad(true);
      SwappedParams params(call.params);
      for (const at::Tensor& leaf : params.leaves()) wrt.push_back(leaf);
      ForkedRng rng(call.rng);
      ActiveRecompute active(recompute);
      torch::jit::Module(call.self.toObject()).forward(std::move(args));
    }
    // Gradients of the outputs that had them in forward, against the recomputed outputs.
    std::vector<at::Tensor> outputs, gradients;
    if (!recompute.outputs) {
      fail(ExitCode::kInternal, unit_label(call) + ": its recomputed forward did not exit");
    }
    for (size_t k = 0; k < differentiable_.size(); ++k) {
      const at::Tensor& out = recompute.outputs->at(differentiable_[k]);
      if (grads[k].defined() && out.requires_grad()) {
        outputs.push_back(out);
        gradients.push_back(grads[k]);
      }
    }
    if (outputs.empty() || wrt.empty()) return torch::autograd::variable_list(num_outputs());
    at::AutoGradMode grad(true);  // the engine runs nodes with grad mode off
    return torch::autograd::grad(outputs, wrt, gradients, /*retain_graph=*/false,
                                 /*create_graph=*/false, /*allow_unused=*/true);
  }

  void release_variables() override { call_.reset(); }

 private:
  std::shared_ptr<Call> call_;
  std::vector<size_t> differentiable_;  // node input k is the call's output differentiable_[k]
};

}  // namespace

void on_call(UnitHooks& hooks, int64_t unit, const c10::IValue& self, const c10::IValue& args) {
  if (recomputing(unit) || !at::GradMode::is_enabled()) return;
  if (!hooks.checkpointed(static_cast<int>(unit))) return;
  pending = Pending{unit, self, args};
}

bool recomputing(int64_t unit) {
  return !recomputes.empty() && recomputes.back()->unit == unit;
}

void capture(int64_t unit, at::TensorList outputs) {
  if (recomputing(unit)) recomputes.back()->outputs = outputs.vec();
}

bool begin(int64_t unit) {
  if (!pending || pending->unit != unit) return false;
  auto call = std::make_shared<Call>();
  call->unit = unit;
  call->self = std::move(pending->self);
  call->args = std::move(pending->args);
  pending.reset();
  std::vector<c10::Device> devices;
  // Meta tensors draw no random numbers: a shape-only trace has no generator to restore.
  const auto note_device = [&](const at::Tensor& t) {
    if (t.defined() && !t.device().is_cpu() && !t.is_meta() &&
        std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  };
  each_tensor(call->args, [&](const at::Tensor& t) {
    note_device(t);
    if (t.requires_grad()) {
      call->inputs.push_back(t);
      call->versions.push_back(t._version());
    }
  });
  call->params = params_of(torch::jit::Module(call->self.toObject()));
  for (const ParamSlot& p : call->params) note_device(p.value);
  call->rng = capture_rng(devices);
  call->grad_was_enabled = at::GradMode::is_enabled();
  open_calls.push_back(std::move(call));
  at::GradMode::set_enabled(false);
  return true;
}

std::optional<std::vector<at::Tensor>> end(int64_t unit, at::TensorList outputs) {
  if (open_calls.empty() || open_calls.back()->unit != unit) return std::nullopt;
  std::shared_ptr<Call> call = std::move(open_calls.back());
  open_calls.pop_back();
  at::GradMode::set_enabled(call->grad_was_enabled);

  std::vector<at::Tensor> next;
  for (const at::Tensor& t : call->inputs) next.push_back(t);
  for (const ParamSlot& p : call->params) next.push_back(p.value);
  std::vector<at::Tensor> aliases;
  for (const at::Tensor& t : outputs) aliases.push_back(alias_of(t));
  if (next.empty()) return aliases;  // nothing to differentiate: no node

  std::vector<size_t> differentiable;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].defined() && torch::autograd::isDifferentiableType(outputs[i].scalar_type())) {
      differentiable.push_back(i);
    }
  }
  NodePtr node = make_node<RecomputeNode>(call, differentiable);
  node->set_next_edges(torch::autograd::collect_next_edges(next));
  for (size_t i : differentiable) torch::autograd::create_gradient_edge(aliases[i], node);
  return aliases;
}

}  // namespace checkpoint

void abandon_checkpointed_calls() {
  if (!checkpoint::open_calls.empty()) {
    at::GradMode::set_enabled(checkpoint::open_calls.front()->grad_was_enabled);
  }
  checkpoint::open_calls.clear();
  checkpoint::pending.reset();
  forget_merged_calls();
}

}  // namespace mfsdp::planner
