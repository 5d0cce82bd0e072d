// check_plan on the sample and on the plan-wide rules: schema, mesh, policy, streams,
// orders and diagnostics. Units, layout, schedule, memory and communication have their own
// test files.

#include "schema/plan_check.h"

#include <gtest/gtest.h>

#include "sample_plan.h"

namespace mfsdp::schema {
namespace {

using Lines = std::vector<std::string>;

Lines check(const Plan& plan) {
  return problem_lines(check_plan(plan));
}

TEST(PlanCheck, SamplePlanHasNoProblem) {
  EXPECT_EQ(check(sample_plan()), Lines{});
}

TEST(PlanCheck, RejectsOtherSchemaVersion) {
  Plan plan = sample_plan();
  plan.schema = "mfsdp.plan/2";
  EXPECT_EQ(check(plan), Lines{"schema: is 'mfsdp.plan/2', expected 'mfsdp.plan/1'"});
}

TEST(PlanCheck, RejectsMeshWhoseSizesDoNotMultiply) {
  Plan plan = sample_plan();
  plan.mesh.world_size = 6;
  EXPECT_EQ(check(plan), Lines{"mesh.world_size: 6 is not shard_size 2 × replicate_size 2"});
}

TEST(PlanCheck, RejectsMeshSizeBelowOne) {
  Plan plan = sample_plan();
  plan.mesh.world_size = 0;
  EXPECT_EQ(check(plan),
            Lines{"mesh.world_size: 0 is invalid; it must be from 1 to 2147483647 (ranks "
                  "are 32-bit ints in Gloo and NCCL)"});
}

TEST(PlanCheck, RejectsParamDtypeThatIsNotFloating) {
  Plan plan = sample_plan();
  plan.policy.param_dtype = "int8";
  EXPECT_EQ(check(plan), Lines{"policy.param_dtype: 'int8' is not a floating dtype; use float32, "
                               "bfloat16, float16 or float64"});
}

TEST(PlanCheck, RejectsUnknownParamDtype) {
  Plan plan = sample_plan();
  plan.policy.param_dtype = "bf16";
  EXPECT_EQ(check(plan),
            Lines{"policy.param_dtype: 'bf16' is not a dtype mfsdp knows; use float32, "
                  "bfloat16, float16 or float64"});
}

TEST(PlanCheck, RejectsReduceDtypeThatIsNotFloating) {
  Plan plan = sample_plan();
  plan.policy.reduce_dtype = "int32";
  EXPECT_EQ(check(plan), Lines{"policy.reduce_dtype: 'int32' is not a floating dtype; use float32, "
                               "bfloat16, float16 or float64"});
}

TEST(PlanCheck, RejectsNegativePrefetch) {
  Plan plan = sample_plan();
  plan.policy.forward_prefetch = -1;
  plan.policy.backward_prefetch = -2;
  EXPECT_EQ(check(plan),
            (Lines{"policy.forward_prefetch: -1 is invalid; it must be 0 (no prefetch) or more",
                   "policy.backward_prefetch: -2 is invalid; it must be 0 (no prefetch) or more"}));
}

TEST(PlanCheck, RejectsNegativeResidentBudget) {
  Plan plan = sample_plan();
  plan.policy.resident_budget_bytes = -1;
  EXPECT_EQ(check(plan),
            Lines{"policy.resident_budget_bytes: -1 is invalid; it must be 0 (no cap) or a "
                  "byte count"});
}

TEST(PlanCheck, RejectsAlignmentThatIsNotAPowerOfTwo) {
  Plan plan = sample_plan();
  plan.policy.align_bytes = 12;
  EXPECT_EQ(check(plan), Lines{"policy.align_bytes: 12 is not a power of two (e.g. 16 or 256)"});
  plan.policy.align_bytes = 0;
  EXPECT_EQ(check(plan), Lines{"policy.align_bytes: 0 is not a power of two (e.g. 16 or 256)"});
}

// Groups lie back to back in a slot; below 16 bytes an odd-length bf16 group would leave the
// next group's fp32 data misaligned.
TEST(PlanCheck, RejectsAlignmentBelowSixteenBytes) {
  Plan plan = sample_plan();
  plan.policy.align_bytes = 8;
  // (The layout, padded for 16 bytes, then also pads more than 8 bytes need.)
  const Lines problems = check(plan);
  ASSERT_FALSE(problems.empty());
  EXPECT_EQ(problems.front(),
            "policy.align_bytes: 8 is too small; it must be a power of two from 16 to "
            "1073741824 (1 GiB) (the groups of a unit lie back to back in one buffer, and each "
            "must start aligned for the GPU)");
}

TEST(PlanCheck, RejectsSeparateStreamsWhenPolicyAsksForOne) {
  Plan plan = sample_plan();
  plan.policy.unified_stream = true;
  EXPECT_EQ(check(plan),
            Lines{"streams: are ['all_gather' ['all_gather'], 'reduce_scatter' ['reduce_scatter', "
                  "'all_reduce']], expected ['unified' ['all_gather', 'reduce_scatter', "
                  "'all_reduce']] for policy.unified_stream true"});
  plan.streams = {{"unified", {"all_gather", "reduce_scatter", "all_reduce"}}};
  EXPECT_EQ(check(plan), Lines{});
}

TEST(PlanCheck, RejectsStreamsInAnotherOrder) {
  Plan plan = sample_plan();
  std::swap(plan.streams[0], plan.streams[1]);
  ASSERT_EQ(check_plan(plan).size(), 1u);
  EXPECT_EQ(check_plan(plan)[0].path, "streams");
}

TEST(PlanCheck, ForwardOrderMustListEveryCalledUnit) {
  Plan plan = sample_plan();
  plan.forward_order.pop_back();
  EXPECT_EQ(check(plan), Lines{"forward_order: misses 'layers.1', which is called 2 time(s)"});
}

TEST(PlanCheck, BackwardOrderMustListEachUnitOnce) {
  Plan plan = sample_plan();
  plan.backward_order.push_back("layers.1");
  EXPECT_EQ(check(plan),
            Lines{"backward_order[3]: 'layers.1' is listed twice (also backward_order[1])"});
}

TEST(PlanCheck, OrdersListOnlyCalledUnits) {
  Plan plan = sample_plan();
  Unit head;
  head.name = "head";
  head.parent = kRootName;
  plan.units.push_back(head);
  plan.forward_order.push_back("head");
  plan.forward_order.push_back("layers.9");
  EXPECT_EQ(check(plan), (Lines{"forward_order[3]: 'head' is never called (call_count 0)",
                                "forward_order[4]: 'layers.9' is not a unit"}));
}

TEST(PlanCheck, RejectsUnknownDiagnosticSeverityAndEmptyCode) {
  Plan plan = sample_plan();
  plan.diagnostics[0].severity = "fatal";
  plan.diagnostics[0].code = "";
  EXPECT_EQ(check(plan),
            (Lines{"diagnostics[0].severity: is 'fatal', expected 'info', 'warning' or 'error'",
                   "diagnostics[0].code: is empty"}));
}

}  // namespace
}  // namespace mfsdp::schema

namespace mfsdp::schema {
namespace {

TEST(PlanCheck, TrainingValuesAreChecked) {
  Plan plan = sample_plan();
  plan.training = Training{};
  plan.training->steps = 10;
  plan.training->lr = 0.1;
  EXPECT_EQ(problem_lines(check_plan(plan)), Lines{});
  plan.training->microbatches = 0;
  plan.training->lr_schedule = "linear";
  plan.training->betas = std::vector<double>{0.9};
  plan.training->momentum = 1.5;
  plan.training->lr = 0.0;
  EXPECT_EQ(problem_lines(check_plan(plan)),
            (Lines{"training.microbatches: must be at least 1, got 0",
                   "training.lr_schedule: is 'linear'; expected one of ['constant', 'cosine']",
                   "training.lr: must be above 0", "training.betas: must hold two numbers, got 1",
                   "training.momentum: must be below 1"}));
}

}  // namespace
}  // namespace mfsdp::schema

namespace mfsdp::schema {
namespace {

TEST(PlanCheck, APredictionNeedsATraceAndTimesThatAddUp) {
  Plan plan = sample_plan();
  StepPrediction p;
  p.profile = "probe";
  p.optimizer = "lamb";
  p.compute_ms = 10;
  p.exposed_comm_ms = 2;
  p.step_ms = 13;
  plan.prediction = p;
  EXPECT_EQ(check(plan),
            (Lines{"prediction: is present without a trace; a step is predicted from the unit "
                   "times or work a trace records",
                   "prediction.optimizer: is 'lamb', expected ['sgd', 'adam', 'adamw']",
                   "prediction.step_ms: is not compute_ms + exposed_comm_ms + contention_ms "
                   "(12.000 ms)"}));
}

}  // namespace
}  // namespace mfsdp::schema

namespace mfsdp::schema {
namespace {

// A shape-only trace: work for every unit of forward_order in place of times, and nothing a
// timed trace has.
Trace meta_trace(const Plan& plan) {
  Trace trace;
  trace.inputs = {"2x16:int64"};
  trace.device = "meta";
  for (const std::string& unit : plan.forward_order) trace.work.push_back({unit, {}, {}, {}});
  trace.loss_work = Work{};
  return trace;
}

TEST(PlanCheck, AMetaTraceHasWorkForEveryUnitAndNoTimes) {
  Plan plan = sample_plan();
  ASSERT_GE(plan.forward_order.size(), 2u);
  plan.trace = meta_trace(plan);
  EXPECT_EQ(check(plan), Lines{});

  plan.trace->work.pop_back();
  plan.trace->times.push_back({plan.forward_order[0], 1, 1, {}, {}});
  plan.trace->timed_steps = 3;
  plan.trace->loss_work.reset();
  EXPECT_EQ(check(plan),
            (Lines{"trace.times: is not empty in a shape-only trace (device 'meta'), which "
                   "times nothing",
                   "trace.timed_steps: is present in a shape-only trace (device 'meta'), "
                   "which times nothing",
                   "trace.loss_work: is missing in a shape-only trace",
                   "trace.work: misses '" + plan.forward_order.back() +
                       "' and every later unit of forward_order"}));
}

TEST(PlanCheck, WorkCountsAreNotNegativeAndComeFromSomeOperator) {
  Plan plan = sample_plan();
  plan.trace = meta_trace(plan);
  plan.trace->work[0].pre_forward.matmul = {4096, 512, 2};
  plan.trace->work[0].backward.elementwise = {64, 256, 0};
  plan.trace->loss_work->embedding = {0, -8, 1};
  EXPECT_EQ(check(plan),
            (Lines{"trace.loss_work.embedding: has a negative count",
                   "trace.work[0].backward.elementwise.ops: is 0 beside FLOPs or bytes: some "
                   "operator did them"}));
}

TEST(PlanCheck, OnlyAMetaTraceHasWorkAndNeitherCanBeOfAnotherDevice) {
  Plan plan = sample_plan();
  plan.trace = meta_trace(plan);
  plan.trace->device = "cuda";
  EXPECT_EQ(check(plan).front(),
            "trace.device: is 'cuda', expected 'meta' (a CPU trace has no device field)");
  plan.trace->device.reset();
  for (const std::string& unit : plan.forward_order)
    plan.trace->times.push_back({unit, 1, 1, {}, {}});
  EXPECT_EQ(check(plan), (Lines{"trace.work: is present in a CPU trace; only a shape-only trace "
                                "(device 'meta') counts work"}));
}

// Fused attention is a way of running a meta trace: "fused" only, and only there.
TEST(PlanCheck, FusedAttentionIsOnlyAMetaTracesAndOnlyFused) {
  Plan plan = sample_plan();
  plan.trace = meta_trace(plan);
  plan.trace->attention = "fused";
  EXPECT_EQ(check(plan), Lines{});
  plan.trace->attention = "flash";
  EXPECT_EQ(check(plan), (Lines{"trace.attention: is 'flash', expected 'fused' (attention as "
                                "traced has no attention field)"}));
  plan = sample_plan();
  plan.trace = Trace{};
  plan.trace->inputs = {"2x16:int64"};
  for (const std::string& unit : plan.forward_order)
    plan.trace->times.push_back({unit, 1, 1, {}, {}});
  plan.trace->attention = "fused";
  EXPECT_EQ(check(plan), (Lines{"trace.attention: is present in a CPU trace; only a shape-only "
                                "trace (device 'meta') models a fused attention kernel"}));
}

// A shape-only trace's work is predicted at a profile's compute rates; only a plan without any
// trace has nothing to predict from.
TEST(PlanCheck, APredictionComesFromATraceMetaOrNot) {
  Plan plan = sample_plan();
  plan.trace = meta_trace(plan);
  StepPrediction p;
  p.profile = "h100-nvlink";
  p.optimizer = "adamw";
  plan.prediction = p;
  EXPECT_EQ(check(plan), Lines{});
  plan.trace.reset();
  EXPECT_EQ(check(plan), (Lines{"prediction: is present without a trace; a step is predicted "
                                "from the unit times or work a trace records"}));
}

}  // namespace
}  // namespace mfsdp::schema
