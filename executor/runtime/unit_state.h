#pragma once
// A unit's two state machines, with checked transitions.
//
// Compute, within one microbatch: a unit called several times in forward returns to RESTING
// between calls; its backward calls stay in BACKWARD until its gradients are ready or
// backward ends.
//
// Sharding: where its parameters are. SHARDED (only the shards), GATHERING (its all-gather
// into the slot is issued), GATHERED (compute has waited for it), and back to SHARDED when
// it is resharded (after a wait, so never straight from GATHERING).

#include <string>

namespace mfsdp::executor {

enum class UnitState { kResting, kForward, kBackward };

const char* state_name(UnitState s);

// Moves `state` to `next` or throws Error(kInternal) naming the unit and both states.
void transition(UnitState& state, UnitState next, const std::string& unit);

enum class ShardState { kSharded, kGathering, kGathered };

const char* state_name(ShardState s);

// Moves `state` to `next` or throws Error(kInternal) naming the unit and both states.
void transition(ShardState& state, ShardState next, const std::string& unit);

}  // namespace mfsdp::executor
