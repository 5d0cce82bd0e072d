#pragma once
// What runs at unit boundaries inside an instrumented TorchScript forward (see
// planner/torchscript/instrumentation.h). The executor implements it to follow a plan; `mfsdp plan
// --trace-input` implements it to record the real unit order. No LibTorch types here.

namespace mfsdp::planner {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // Entering a unit's forward, before it reads any parameter.
  virtual void pre_forward(int unit) = 0;
  // Its forward has produced its outputs.
  virtual void post_forward(int unit) = 0;
  // Gradients have reached the unit's outputs, before any of its backward runs. Once per call
  // of the unit whose outputs take part in the gradient, on the thread autograd runs that
  // part of backward on. An exception thrown here reaches backward()'s caller unchanged; one
  // thrown from the forward hooks arrives as the TorchScript interpreter's std::runtime_error.
  virtual void pre_backward(int unit) = 0;
  // The dtype (schema name, e.g. "bfloat16") the unit's floating tensor inputs are cast to at
  // entry, or nullptr to leave them: a unit gathered in a lower precision computes in it, as
  // FSDP2's MixedPrecisionPolicy does. Their gradients are cast back on the way out.
  virtual const char* input_dtype(int /*unit*/) { return nullptr; }
  // Whether the unit's forward runs under activation checkpointing (planner/torchscript/
  // unit_checkpoint.h): nothing saved for backward inside it, recomputed when backward reaches
  // it, after its pre_backward. Only units instrument_units was told to checkpoint can be.
  virtual bool checkpointed(int /*unit*/) { return false; }
};

// Installs the hooks the instrumented graphs call, process-wide (nullptr: none; the operators
// then only pass their tensors through). Returns the previous ones.
UnitHooks* set_unit_hooks(UnitHooks* hooks);

// After a forward that threw: closes the checkpointed calls it left open on this thread,
// restoring grad mode as it was when the first began. Whoever runs an instrumented forward
// calls it when the forward fails.
void abandon_checkpointed_calls();

}  // namespace mfsdp::planner
