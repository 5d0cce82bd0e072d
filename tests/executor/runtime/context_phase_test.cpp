// The context's phase machine (context_phase.h) and a unit's sharding states
// (unit_state.h), without a context.
#include "executor/runtime/context_phase.h"
#include "executor/runtime/unit_state.h"

#include <stdexcept>

#include <gtest/gtest.h>

#include "schema/error.h"

namespace mfsdp::executor {
namespace {

std::string refusal(ContextPhase& phase, Phase next) {
  try {
    phase.to(next);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kInternal);
    return e.what();
  }
  return "";
}

TEST(ContextPhase, TrainingMicrobatchGoesForwardBackwardIdle) {
  ContextPhase phase;
  EXPECT_EQ(phase.now(), Phase::kIdle);
  EXPECT_FALSE(phase.in_microbatch());
  phase.to(Phase::kForward);
  EXPECT_TRUE(phase.in_microbatch());
  phase.to(Phase::kBackward);
  EXPECT_TRUE(phase.in_microbatch());
  phase.to(Phase::kIdle);
  EXPECT_FALSE(phase.in_microbatch());
}

TEST(ContextPhase, BackwardThatReachedNoUnitEndsFromForward) {
  ContextPhase phase;
  phase.to(Phase::kForward);
  phase.to(Phase::kIdle);
  EXPECT_EQ(phase.now(), Phase::kIdle);
}

TEST(ContextPhase, EvaluationStartsAndEndsIdleAndIsNotAMicrobatch) {
  ContextPhase phase;
  phase.to(Phase::kEvaluating);
  EXPECT_FALSE(phase.in_microbatch());
  EXPECT_EQ(refusal(phase, Phase::kBackward), "the context cannot go from EVALUATING to BACKWARD");
  phase.to(Phase::kIdle);
}

TEST(ContextPhase, RefusesSkippedAndRepeatedPhases) {
  ContextPhase phase;
  EXPECT_EQ(refusal(phase, Phase::kBackward), "the context cannot go from IDLE to BACKWARD");
  EXPECT_EQ(refusal(phase, Phase::kIdle), "the context cannot go from IDLE to IDLE");
  phase.to(Phase::kForward);
  EXPECT_EQ(refusal(phase, Phase::kForward), "the context cannot go from FORWARD to FORWARD");
  EXPECT_EQ(refusal(phase, Phase::kEvaluating), "the context cannot go from FORWARD to EVALUATING");
  phase.to(Phase::kBackward);
  EXPECT_EQ(refusal(phase, Phase::kForward), "the context cannot go from BACKWARD to FORWARD");
  EXPECT_EQ(phase.now(), Phase::kBackward);  // a refused move changes nothing
}

TEST(ContextPhase, FailedIsFinalAndKeepsTheFirstError) {
  ContextPhase phase;
  phase.to(Phase::kForward);
  phase.fail(std::make_exception_ptr(std::runtime_error("first")));
  phase.fail(std::make_exception_ptr(std::runtime_error("second")));
  EXPECT_TRUE(phase.failed());
  EXPECT_FALSE(phase.in_microbatch());
  try {
    std::rethrow_exception(phase.error());
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first");
  }
  EXPECT_EQ(refusal(phase, Phase::kIdle), "the context cannot go from FAILED to IDLE");
  EXPECT_EQ(refusal(phase, Phase::kFailed), "the context cannot go from FAILED to FAILED");
}

std::string refusal(ShardState& state, ShardState next) {
  try {
    transition(state, next, "layers.0");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kInternal);
    return e.what();
  }
  return "";
}

TEST(UnitShardState, GathersWaitsAndReshardsInThatOrder) {
  ShardState state = ShardState::kSharded;
  transition(state, ShardState::kGathering, "layers.0");
  transition(state, ShardState::kGathered, "layers.0");
  transition(state, ShardState::kSharded, "layers.0");
  EXPECT_EQ(state, ShardState::kSharded);
}

TEST(UnitShardState, RefusesASecondGatherAndAReshardBeforeTheWait) {
  ShardState state = ShardState::kSharded;
  EXPECT_EQ(refusal(state, ShardState::kGathered),
            "unit layers.0 cannot go from SHARDED to GATHERED");
  transition(state, ShardState::kGathering, "layers.0");
  EXPECT_EQ(refusal(state, ShardState::kGathering),
            "unit layers.0 cannot go from GATHERING to GATHERING");
  EXPECT_EQ(refusal(state, ShardState::kSharded),
            "unit layers.0 cannot go from GATHERING to SHARDED");
  transition(state, ShardState::kGathered, "layers.0");
  EXPECT_EQ(refusal(state, ShardState::kGathering),
            "unit layers.0 cannot go from GATHERED to GATHERING");
}

}  // namespace
}  // namespace mfsdp::executor
