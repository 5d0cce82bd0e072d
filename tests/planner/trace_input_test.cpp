// `mfsdp plan --trace-input`: parsing the specs, tracing the fixture models (expected orders
// written out from tests/fixtures/make_fixtures.py), and how derive_orders uses a traced run,
// including hand-built runs that contradict the static call graph.
#include "planner/trace_input.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <nlohmann/json.hpp>

#include "planner/sharding_scope.h"
#include "schema/plan_check.h"
#include "schema/plan_json.h"
#include "tests/planner/ir_builder.h"
#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

using Names = std::vector<std::string>;

std::vector<TraceInput> inputs(const Names& specs) {
  std::vector<TraceInput> out;
  for (const auto& spec : specs) out.push_back(parse_trace_input(spec));
  return out;
}

// The traced forward as "pre_forward <unit>" / "post_forward <unit>" lines.
Names forward_events(const TracedRun& run) {
  Names out;
  for (const TracedEvent& e : run.forward) {
    out.push_back((e.enter ? "pre_forward " : "post_forward ") +
                  schema::unit_name_of(run.units[e.unit]));
  }
  return out;
}

Names backward_units(const TracedRun& run) {
  Names out;
  for (int u : run.backward) out.push_back(schema::unit_name_of(run.units[u]));
  return out;
}

// Plans a fixture with its units registered in `units` order, traced on `specs`.
schema::Plan traced_plan(const std::string& name, const Names& units, const Names& specs) {
  ShardedModel model = ShardedModel::load(fixture(name));
  ShardingScope scope(model, {2, 2, 1}, {});
  Names paths;
  for (const auto& u : units) {
    scope.fully_shard(u);
    paths.push_back(u == "<root>" ? "" : u);
  }
  scope.use_trace(trace_units(fixture(name), paths, inputs(specs)));
  return scope.finalize();
}

schema::Plan static_plan(const std::string& name, const Names& units) {
  ShardedModel model = ShardedModel::load(fixture(name));
  ShardingScope scope(model, {2, 2, 1}, {});
  for (const auto& u : units) scope.fully_shard(u);
  return scope.finalize();
}

const schema::Diagnostic& diagnostic(const schema::Plan& plan, const std::string& code,
                                     const std::string& where) {
  for (const auto& d : plan.diagnostics) {
    if (d.code == code && d.where == where) return d;
  }
  throw std::logic_error("no diagnostic " + code + " " + where);
}

// check_plan's findings, one per line.
std::string problems(const schema::Plan& plan) {
  std::string out;
  for (const auto& p : schema::check_plan(plan)) out += p.str() + "\n";
  return out;
}

Names timed_units(const schema::Plan& plan) {
  Names out;
  for (const auto& t : plan.trace->times) out.push_back(t.unit);
  return out;
}

TEST(TraceInputSpec, ParsesShapeAndDtype) {
  const TraceInput tokens = parse_trace_input("2x64:int64");
  EXPECT_EQ(tokens.spec, "2x64:int64");
  EXPECT_EQ(tokens.shape, (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(tokens.dtype, "int64");
  const TraceInput images = parse_trace_input("8x3x32x32");
  EXPECT_EQ(images.shape, (std::vector<int64_t>{8, 3, 32, 32}));
  EXPECT_EQ(images.dtype, "float32");
  EXPECT_EQ(parse_trace_input("7:bfloat16").shape, std::vector<int64_t>{7});
  EXPECT_EQ(parse_trace_input("8,3,32,32").shape, (std::vector<int64_t>{8, 3, 32, 32}));
  EXPECT_EQ(parse_trace_input("2,64:int64").dtype, "int64");
}

TEST(TraceInputSpec, MalformedSpecsAreUsageErrorsNamingSpecAndForm) {
  const std::string form = "; expected SHAPE[:DTYPE] such as 2x64:int64 or 8x3x32x32";
  EXPECT_MFSDP_ERROR(parse_trace_input(""), ExitCode::kUsage,
                     "--trace-input '': dimension 1 is empty" + form);
  EXPECT_MFSDP_ERROR(parse_trace_input("2x"), ExitCode::kUsage,
                     "--trace-input '2x': dimension 2 is empty" + form);
  EXPECT_MFSDP_ERROR(parse_trace_input("2xa"), ExitCode::kUsage,
                     "--trace-input '2xa': dimension 2 'a' is not a whole number" + form);
  EXPECT_MFSDP_ERROR(parse_trace_input("-2x3"), ExitCode::kUsage,
                     "dimension 1 '-2' is not a whole number");
  EXPECT_MFSDP_ERROR(parse_trace_input("0x4"), ExitCode::kUsage,
                     "--trace-input '0x4': dimension 1 is 0; every dimension must be at least 1");
  EXPECT_MFSDP_ERROR(parse_trace_input("2x64:long"), ExitCode::kUsage,
                     "--trace-input '2x64:long': unknown dtype 'long' (mfsdp knows float32, "
                     "float64, float16, bfloat16, int64, int32, int16, int8, uint8, bool)" +
                         form);
  EXPECT_MFSDP_ERROR(parse_trace_input("2x64:"), ExitCode::kUsage, "unknown dtype ''");
}

TEST(TraceInputSpec, AnInputOverOneGiBIsAUsageErrorSayingTheLimit) {
  // 10^10 int64 zeros: LibTorch's allocation failure used to end mfsdp as an internal error.
  EXPECT_MFSDP_ERROR(parse_trace_input("100000x100000:int64"), ExitCode::kUsage,
                     "--trace-input '100000x100000:int64' is 80000000000 bytes; an example input "
                     "holds at most 1073741824 bytes (1 GiB), so trace with a smaller batch, e.g. "
                     "2x64:int64");
  EXPECT_MFSDP_ERROR(parse_trace_input("100000x100000x1000"), ExitCode::kUsage,
                     "'100000x100000x1000' is 40000000000000 bytes; an example input holds at "
                     "most 1073741824 bytes");
  EXPECT_MFSDP_ERROR(parse_trace_input("4294967296x4294967296"), ExitCode::kUsage,
                     "is more than 2^63 bytes; an example input holds at most");
  EXPECT_MFSDP_ERROR(parse_trace_input("99999999999999999999999"), ExitCode::kUsage,
                     "is more than 2^63 bytes; an example input holds at most");
  EXPECT_EQ(parse_trace_input("16384x16384:int32").shape, (std::vector<int64_t>{16384, 16384}));
  EXPECT_MFSDP_ERROR(parse_trace_input("16384x16385:int32"), ExitCode::kUsage,
                     "is 1073807360 bytes");
}

TEST(TraceUnits, RecordsTheReorderedCallOrderAndReverseBackward) {
  const TracedRun run =
      trace_units(fixture("reordered.pt"), {"", "head", "blocks.0", "blocks.1", "blocks.2", "stem"},
                  inputs({"4x8"}));
  EXPECT_EQ(run.inputs, Names{"4x8"});
  EXPECT_EQ(forward_events(run),
            (Names{"pre_forward <root>", "pre_forward stem", "post_forward stem",
                   "pre_forward blocks.2", "post_forward blocks.2", "pre_forward blocks.0",
                   "post_forward blocks.0", "pre_forward blocks.1", "post_forward blocks.1",
                   "pre_forward head", "post_forward head", "post_forward <root>"}));
  EXPECT_EQ(backward_units(run),
            (Names{"<root>", "head", "blocks.1", "blocks.0", "blocks.2", "stem"}));
  ASSERT_EQ(run.forward_ms.size(), 6u);
  ASSERT_EQ(run.backward_ms.size(), 6u);
  for (size_t u = 0; u < 6; ++u) {
    EXPECT_GE(run.forward_ms[u], 0.0) << run.units[u];
    EXPECT_GE(run.backward_ms[u], 0.0) << run.units[u];
    // The model's forward encloses every other unit's.
    EXPECT_GE(run.forward_ms[0], run.forward_ms[u]) << run.units[u];
  }
}

TEST(TraceUnits, RecordsEveryCallOfAUnitCalledTwice) {
  const TracedRun run =
      trace_units(fixture("called_twice.pt"), {"inp", "shared", "mid", "out"}, inputs({"4x8"}));
  EXPECT_EQ(
      forward_events(run),
      (Names{"pre_forward inp", "post_forward inp", "pre_forward shared", "post_forward shared",
             "pre_forward mid", "post_forward mid", "pre_forward shared", "post_forward shared",
             "pre_forward out", "post_forward out"}));
  EXPECT_EQ(backward_units(run), (Names{"out", "shared", "mid", "shared", "inp"}));
}

TEST(TraceUnits, IntegerInputsAreValidEmbeddingIds) {
  const TracedRun run =
      trace_units(fixture("tied_lm.pt"), {"", "layers.0", "layers.1"}, inputs({"2x16:int64"}));
  EXPECT_EQ(backward_units(run), (Names{"<root>", "layers.1", "layers.0"}));
}

TEST(TraceUnits, InputsThatDoNotFitForwardAreRefused) {
  EXPECT_MFSDP_ERROR(trace_units(fixture("reordered.pt"), {"stem"}, inputs({"4x8", "4x8"})),
                     ExitCode::kUsage,
                     "reordered.pt: forward takes 1 argument(s) (x), but 2 --trace-input were "
                     "given; give one per forward argument, in order");
  EXPECT_MFSDP_ERROR(trace_units(fixture("reordered.pt"), {"stem"}, {}), ExitCode::kUsage,
                     "forward takes 1 argument(s) (x), but 0 --trace-input were given");
}

TEST(TraceUnits, AFailingForwardIsAModelErrorWithTheInterpretersMessage) {
  const auto trace = [] { return trace_units(fixture("reordered.pt"), {"stem"}, inputs({"4x7"})); };
  // LibTorch 2.x puts the operator's name ("addmm: ") before the interpreter's message.
  EXPECT_MFSDP_ERROR((void)trace(), ExitCode::kModel,
                     "reordered.pt: the traced step on --trace-input 4x7 failed in forward: ");
  EXPECT_MFSDP_ERROR((void)trace(), ExitCode::kModel,
                     "mat1 and mat2 shapes cannot be multiplied (4x7 and 8x16)");
}

TEST(TracedPlan, ConditionalPlanFollowsTheBranchTakenAndTheLoopCount) {
  // The documented input: standard normal values from a generator seeded with position 0.
  auto reference = torch::jit::load(fixture("conditional.pt"));
  const at::Tensor x = at::randn({4, 8}, at::make_generator<at::CPUGeneratorImpl>(0));
  const bool takes_a =
      reference.attr("pre").toModule().forward({x}).toTensor().sum().item<float>() > 0;
  const std::string taken = takes_a ? "branch_a" : "branch_b";
  const std::string skipped = takes_a ? "branch_b" : "branch_a";

  const Names units = {"pre", "branch_a", "branch_b", "post", "refine", "<root>"};
  const schema::Plan plan = traced_plan("conditional.pt", units, {"4x8"});
  // 4 % 3 = 1 turn of the loop over refine.
  EXPECT_EQ(plan.forward_order, (Names{"<root>", "pre", taken, "post", "refine"}));
  EXPECT_EQ(plan.backward_order, (Names{"<root>", "refine", "post", taken, "pre"}));
  EXPECT_EQ(unit(plan, taken).call_count, 1);
  EXPECT_EQ(unit(plan, skipped).call_count, 0);
  EXPECT_TRUE(unit(plan, skipped).conditional);
  Names expected;
  for (const std::string branch : {"branch_a", "branch_b"}) {
    if (branch == skipped) expected.push_back("trace.not_called " + branch);
    expected.push_back("unit.conditional " + branch);
  }
  expected.insert(expected.end(), {"unit.in_loop refine", "unit.empty <root>"});
  EXPECT_EQ(diagnostic_codes(plan), expected);
  EXPECT_NE(diagnostic(plan, "unit.conditional", taken)
                .message.find("the plan follows the path the traced step took (1 time)"),
            std::string::npos);
  for (const auto& e : plan.schedule) EXPECT_NE(e.unit, std::optional<std::string>(skipped));

  ASSERT_TRUE(plan.trace);
  EXPECT_EQ(plan.trace->inputs, Names{"4x8"});
  EXPECT_EQ(plan.trace->differs_from_static,
            (Names{"units.call_count", "forward_order", "backward_order"}));
  EXPECT_EQ(timed_units(plan), plan.forward_order);
  for (const auto& t : plan.trace->times) {
    EXPECT_GE(t.forward_ms, 0.0) << t.unit;
    EXPECT_GE(t.backward_ms, 0.0) << t.unit;
    EXPECT_EQ(t.forward_ms, std::round(t.forward_ms * 100) / 100) << t.unit;
  }
  EXPECT_EQ(problems(plan), "");
}

TEST(TracedPlan, LoopTurnsBecomeCallsAndAnUnturnedLoopLeavesItsUnitOut) {
  const Names units = {"pre", "branch_a", "branch_b", "post", "refine"};
  // 5 % 3 = 2 turns: refine is called twice; one call site statically.
  const schema::Plan twice = traced_plan("conditional.pt", units, {"5x8"});
  EXPECT_EQ(unit(twice, "refine").call_count, 2);
  EXPECT_EQ(twice.forward_order.back(), "refine");
  EXPECT_NE(diagnostic(twice, "unit.in_loop", "refine")
                .message.find("the plan counts the 2 times the traced step called it"),
            std::string::npos);
  EXPECT_EQ(diagnostic(twice, "unit.called_multiple_times", "refine").severity, "info");
  EXPECT_EQ(problems(twice), "");

  // 3 % 3 = 0 turns.
  const schema::Plan none = traced_plan("conditional.pt", units, {"3x8"});
  EXPECT_EQ(unit(none, "refine").call_count, 0);
  EXPECT_EQ(none.forward_order.back(), "post");
  EXPECT_EQ(diagnostic(none, "trace.not_called", "refine").severity, "warning");
  EXPECT_EQ(problems(none), "");
}

TEST(TracedPlan, TracingAStraightModelChangesNoOrderAndIsDeterministic) {
  const Names units = {"stem", "blocks.0", "blocks.1", "blocks.2", "head", "<root>"};
  schema::Plan a = traced_plan("reordered.pt", units, {"4x8"});
  schema::Plan b = traced_plan("reordered.pt", units, {"4x8"});
  const schema::Plan untraced = static_plan("reordered.pt", units);
  EXPECT_EQ(a.trace->differs_from_static, Names{});
  EXPECT_EQ(a.forward_order, untraced.forward_order);
  EXPECT_EQ(a.backward_order, untraced.backward_order);
  EXPECT_EQ(a.diagnostics.size(), untraced.diagnostics.size());
  // Without their measured times, a traced plan is its untraced plan plus the trace's inputs
  // and the activations it measured (tensor bytes, the same in every trace).
  for (schema::Plan* plan : {&a, &b}) {
    plan->trace->times.clear();
    plan->trace->loss_ms.reset();
    plan->trace->calibration_gflops.reset();
  }
  EXPECT_EQ(schema::dump_plan(a), schema::dump_plan(b));
  ASSERT_TRUE(a.memory.activations.has_value());
  a.trace.reset();
  a.memory.activations.reset();
  EXPECT_EQ(schema::dump_plan(a), schema::dump_plan(untraced));
}

TEST(TracedPlan, AFrozenFirstUnitGetsNoBackwardAndGoesLast) {
  // embed's weight does not require grad and its input is token ids: nothing flows back into it.
  const schema::Plan plan =
      traced_plan("mixed.pt", {"embed", "proj", "proj64", "bn", "<root>"}, {"3x7:int64"});
  EXPECT_EQ(plan.forward_order, (Names{"<root>", "embed", "proj", "proj64", "bn"}));
  EXPECT_EQ(plan.backward_order, (Names{"<root>", "bn", "proj64", "proj", "embed"}));
  EXPECT_EQ(diagnostic(plan, "trace.no_backward", "embed").severity, "info");
  EXPECT_EQ(problems(plan), "");
}

TEST(TracedPlan, TraceSectionRoundTripsThroughJson) {
  const schema::Plan plan =
      traced_plan("called_twice.pt", {"inp", "shared", "mid", "out"}, {"4x8"});
  const std::string text = schema::dump_plan(plan);
  const schema::ParseResult parsed = schema::parse_plan(nlohmann::json::parse(text));
  ASSERT_TRUE(parsed.problems.empty()) << parsed.problems[0].str();
  ASSERT_TRUE(parsed.plan.trace);
  EXPECT_EQ(schema::dump_plan(parsed.plan), text);
  EXPECT_EQ(unit(parsed.plan, "shared").call_count, 2);
}

// Hand-built models and runs: what derive_orders does with a trace the static graph disagrees
// with. Units of the run are registration order.
TracedRun run_of(const Names& units, const std::vector<TracedEvent>& forward,
                 const std::vector<int>& backward) {
  TracedRun run;
  run.inputs = {"1"};
  for (const std::string& unit : units) run.units.push_back({unit});
  run.forward = forward;
  run.backward = backward;
  run.forward_ms.assign(units.size(), 0.5);
  run.backward_ms.assign(units.size(), 0.25);
  return run;
}

schema::Plan plan_with_run(const testing::IrBuilder& b, const Names& units, TracedRun run) {
  ShardedModel model = b.model();
  ShardingScope scope(model, {2, 2, 1}, {});
  for (const auto& u : units) scope.fully_shard(u);
  scope.use_trace(std::move(run));
  return scope.finalize();
}

testing::IrBuilder three_modules() {
  testing::IrBuilder b;
  b.module("a").module("b").module("c");
  for (const char* m : {"a", "b", "c"}) b.param(m, "w", {4});
  return b;
}

TEST(TracedOrders, AUnitTheStaticGraphNeverReachesIsPlannedAndDiagnosed) {
  testing::IrBuilder b = three_modules();
  b.call("a").call("b");  // c is unreachable statically
  const schema::Plan plan = plan_with_run(
      b, {"a", "b", "c"},
      run_of({"a", "b", "c"}, {{true, 0}, {false, 0}, {true, 2}, {false, 2}, {true, 1}, {false, 1}},
             {1, 2, 0}));
  EXPECT_EQ(plan.forward_order, (Names{"a", "c", "b"}));
  EXPECT_EQ(plan.backward_order, (Names{"b", "c", "a"}));
  EXPECT_EQ(diagnostic_codes(plan),
            (Names{"trace.contradicts_static c", "order.differs_from_definition c"}));
  EXPECT_EQ(plan.diagnostics[0].message,
            "unit c ran 1 time in the traced step, but the static call graph never reaches it "
            "(it is called in a way mfsdp cannot follow statically); the plan follows the trace");
  EXPECT_EQ(plan.trace->times.size(), 3u);
  EXPECT_EQ(plan.trace->times[1].unit, "c");
  EXPECT_EQ(plan.trace->times[1].forward_ms, 0.5);
  EXPECT_EQ(problems(plan), "");
}

TEST(TracedOrders, UnconditionalUnitsRunInAnotherOrderContradictTheStaticGraph) {
  testing::IrBuilder b = three_modules();
  b.call("a").call("b").call("c");
  const schema::Plan plan = plan_with_run(
      b, {"a", "b", "c"},
      run_of({"a", "b", "c"}, {{true, 1}, {false, 1}, {true, 0}, {false, 0}, {true, 2}, {false, 2}},
             {2, 0, 1}));
  EXPECT_EQ(plan.forward_order, (Names{"b", "a", "c"}));
  EXPECT_EQ(plan.trace->differs_from_static, (Names{"forward_order", "backward_order"}));
  // The fewest units whose moves explain it: one of a and b, not c.
  const Names contradictions = {"order.differs_from_definition b", "trace.contradicts_static b"};
  EXPECT_EQ(diagnostic_codes(plan), contradictions);
  EXPECT_NE(plan.diagnostics[1].message.find(
                "unit b runs at forward position 1 in the traced step, but the static call graph, "
                "where its calls are unconditional, places it at position 2"),
            std::string::npos);
}

TEST(TracedOrders, BackwardOrderFollowsTheTraceAndADifferenceFromTheScheduleIsReported) {
  testing::IrBuilder b = three_modules();
  b.call("a").call("b").call("c");
  // Backward reaches b before c, though c ran last.
  const schema::Plan plan = plan_with_run(
      b, {"a", "b", "c"},
      run_of({"a", "b", "c"}, {{true, 0}, {false, 0}, {true, 1}, {false, 1}, {true, 2}, {false, 2}},
             {1, 2, 0}));
  EXPECT_EQ(plan.forward_order, (Names{"a", "b", "c"}));
  EXPECT_EQ(plan.backward_order, (Names{"b", "c", "a"}));
  EXPECT_EQ(plan.trace->differs_from_static, Names{"backward_order"});
  EXPECT_EQ(diagnostic_codes(plan), Names{"trace.backward_differs b"});
  EXPECT_NE(plan.diagnostics[0].message.find(
                "the traced backward reached unit b at pre_backward 1 of 3, where the schedule, "
                "which reverses the forward calls, expects unit c"),
            std::string::npos);
  EXPECT_EQ(problems(plan), "");
}

TEST(TracedOrders, MoreCallsThanStaticCallSitesOutsideALoopContradict) {
  testing::IrBuilder b = three_modules();
  b.call("a").call("b").call("c");
  const schema::Plan plan = plan_with_run(b, {"a", "b", "c"},
                                          run_of({"a", "b", "c"},
                                                 {{true, 0},
                                                  {false, 0},
                                                  {true, 1},
                                                  {false, 1},
                                                  {true, 1},
                                                  {false, 1},
                                                  {true, 2},
                                                  {false, 2}},
                                                 {2, 1, 1, 0}));
  EXPECT_EQ(unit(plan, "b").call_count, 2);
  EXPECT_EQ(diagnostic(plan, "trace.contradicts_static", "b").message,
            "unit b ran 2 times in the traced step, but it has 1 static call site(s), none in a "
            "loop; the plan follows the trace");
}

TEST(TracedOrders, MalformedRunsAndRunsForOtherUnitsAreRefused) {
  testing::IrBuilder b = three_modules();
  b.call("a").call("b").call("c");
  EXPECT_MFSDP_ERROR(
      plan_with_run(b, {"a", "b", "c"}, run_of({"a", "b", "c"}, {{true, 0}, {false, 1}}, {})),
      ExitCode::kInternal,
      "the traced run is malformed: post_forward of b closes no innermost open "
      "call");
  EXPECT_MFSDP_ERROR(plan_with_run(b, {"a", "b", "c"}, run_of({"a", "c", "b"}, {}, {})),
                     ExitCode::kPlanning,
                     "the trace was recorded for other units than the scope registered, or in "
                     "another order; trace the registered units, in registration order");
}

}  // namespace
}  // namespace mfsdp::planner
