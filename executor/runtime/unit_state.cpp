#include "executor/runtime/unit_state.h"

#include "schema/error.h"

namespace mfsdp::executor {

const char* state_name(UnitState s) {
  switch (s) {
    case UnitState::kResting:
      return "RESTING";
    case UnitState::kForward:
      return "FORWARD";
    case UnitState::kBackward:
      return "BACKWARD";
  }
  return "?";
}

void transition(UnitState& state, UnitState next, const std::string& unit) {
  const bool allowed = (state == UnitState::kResting && next == UnitState::kForward) ||
                       (state == UnitState::kForward && next == UnitState::kResting) ||
                       (state == UnitState::kResting && next == UnitState::kBackward) ||
                       (state == UnitState::kBackward && next == UnitState::kBackward) ||
                       (state == UnitState::kBackward && next == UnitState::kResting);
  if (!allowed) {
    fail(ExitCode::kInternal,
         "unit " + unit + " cannot go from " + state_name(state) + " to " + state_name(next));
  }
  state = next;
}

const char* state_name(ShardState s) {
  switch (s) {
    case ShardState::kSharded:
      return "SHARDED";
    case ShardState::kGathering:
      return "GATHERING";
    case ShardState::kGathered:
      return "GATHERED";
  }
  return "?";
}

void transition(ShardState& state, ShardState next, const std::string& unit) {
  const bool allowed = (state == ShardState::kSharded && next == ShardState::kGathering) ||
                       (state == ShardState::kGathering && next == ShardState::kGathered) ||
                       (state == ShardState::kGathered && next == ShardState::kSharded);
  if (!allowed) {
    fail(ExitCode::kInternal,
         "unit " + unit + " cannot go from " + state_name(state) + " to " + state_name(next));
  }
  state = next;
}

}  // namespace mfsdp::executor
