#pragma once
// The operators instrument_units inserts into unit forwards. Their schemas, kernels and the
// process-wide UnitHooks they call live in unit_ops.cpp; naming an operator through these
// constants also links that file, and with it the operator registration, into the binary.

namespace mfsdp::planner {

// mfsdp::unit_enter(int unit, Tensor[] inputs) -> Tensor[]
extern const char* const kUnitEnterOp;
// mfsdp::unit_exit(int unit, Tensor[] outputs) -> Tensor[]
extern const char* const kUnitExitOp;
// mfsdp::unit_call(int unit, Any self, Any args) -> (): ahead of unit_enter in the forward of
// a class with a checkpointed unit, the module and its arguments as a tuple.
extern const char* const kUnitCallOp;

}  // namespace mfsdp::planner
