#pragma once
// The context's phase, with checked transitions (executor/README.md has the diagram):
//
//   IDLE --first pre_forward--> FORWARD --first pre_backward--> BACKWARD
//    ^  ^                          |                                |
//    |  +------end of backward-----+--------------------------------+
//    +--end of evaluation-- EVALUATING <--evaluate()-- IDLE
//
// and from any phase to FAILED, which is final: after a failure the context refuses further
// work with the first error. A microbatch runs from FORWARD to its end of backward; a
// backward whose loss reached no unit ends from FORWARD. No LibTorch here.

#include <exception>
#include <string>

namespace mfsdp::executor {

enum class Phase { kIdle, kForward, kBackward, kEvaluating, kFailed };

const char* phase_name(Phase phase);

class ContextPhase {
 public:
  Phase now() const { return now_; }
  // Inside a training microbatch: its forward has begun and its end of backward has not run.
  bool in_microbatch() const { return now_ == Phase::kForward || now_ == Phase::kBackward; }
  bool failed() const { return now_ == Phase::kFailed; }

  // Moves to `next` or throws Error(kInternal) naming both phases. Use fail() for FAILED.
  void to(Phase next);
  // FAILED with `error`, unless already failed (the first error is kept).
  void fail(std::exception_ptr error);
  // The first error; null unless failed().
  const std::exception_ptr& error() const { return error_; }

 private:
  Phase now_ = Phase::kIdle;
  std::exception_ptr error_;
};

}  // namespace mfsdp::executor
