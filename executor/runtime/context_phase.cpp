#include "executor/runtime/context_phase.h"

#include "schema/error.h"

namespace mfsdp::executor {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kIdle:
      return "IDLE";
    case Phase::kForward:
      return "FORWARD";
    case Phase::kBackward:
      return "BACKWARD";
    case Phase::kEvaluating:
      return "EVALUATING";
    case Phase::kFailed:
      return "FAILED";
  }
  return "?";
}

void ContextPhase::to(Phase next) {
  const bool allowed = (now_ == Phase::kIdle && next == Phase::kForward) ||
                       (now_ == Phase::kForward && next == Phase::kBackward) ||
                       (now_ == Phase::kForward && next == Phase::kIdle) ||
                       (now_ == Phase::kBackward && next == Phase::kIdle) ||
                       (now_ == Phase::kIdle && next == Phase::kEvaluating) ||
                       (now_ == Phase::kEvaluating && next == Phase::kIdle);
  if (!allowed) {
    mfsdp::fail(ExitCode::kInternal, std::string("the context cannot go from ") + phase_name(now_) +
                                         " to " + phase_name(next));
  }
  now_ = next;
}

void ContextPhase::fail(std::exception_ptr error) {
  if (now_ == Phase::kFailed) return;
  now_ = Phase::kFailed;
  error_ = std::move(error);
}

}  // namespace mfsdp::executor
