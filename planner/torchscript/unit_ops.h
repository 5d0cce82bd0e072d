#pragma once
// The operators instrument_units inserts into unit forwards. Their schemas, kernels and the
// process-wide UnitHooks they call live in unit_ops.cpp; naming an operator through these
// constants also links that file, and with it the operator registration, into the binary.

#include <cstdint>

namespace mfsdp::planner {

// The id an instrumented module carries and passes as the operators' `unit`: its unit's
// index, and for one of a merged unit's modules also its place among them and their number
// (bits 32-47 and 48-62), which the operators use to report the unit once per call.
int64_t unit_ops_id(int64_t unit, int64_t member, int64_t members);
// Forgets the merged units' calls a forward that threw left open (abandon_checkpointed_calls).
void forget_merged_calls();

// mfsdp::unit_enter(int unit, Tensor[] inputs) -> Tensor[]
extern const char* const kUnitEnterOp;
// mfsdp::unit_exit(int unit, Tensor[] outputs) -> Tensor[]
extern const char* const kUnitExitOp;
// mfsdp::unit_call(int unit, Any self, Any args) -> (): ahead of unit_enter in the forward of
// a class with a checkpointed unit, the module and its arguments as a tuple.
extern const char* const kUnitCallOp;

}  // namespace mfsdp::planner
