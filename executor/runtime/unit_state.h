#pragma once
// A unit's lifecycle within one microbatch, with checked transitions. A unit called several
// times in forward returns to RESTING between calls; its backward calls stay in BACKWARD
// until its gradients are ready or backward ends.

#include <string>

namespace mfsdp::executor {

enum class UnitState { kResting, kForward, kBackward };

const char* state_name(UnitState s);

// Moves `state` to `next` or throws Error(kInternal) naming the unit and both states.
void transition(UnitState& state, UnitState next, const std::string& unit);

}  // namespace mfsdp::executor
