// How training by a plan fails: a plan whose unit order is not the model's, ranks given
// different plans, and a rank that dies mid-step. Each rank must end with one clear error
// line and an exit code, never a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "executor/comm/rendezvous.h"
#include "planner/sharding_scope.h"
#include "schema/plan_json.h"
#include "tests/executor/parity/parity_config.h"
#include "tests/executor/parity/rank_processes.h"
#include "tests/executor/parity/reference_training.h"

namespace mfsdp::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kExitUsage = 2;
constexpr int kExitRuntime = 6;

std::string scratch_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/executor_failure_" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

std::string write_plan(planner::ShardedModel& model, int world, schema::Policy policy,
                       const std::string& path) {
  planner::ShardingScope scope(model, {world, world, 1}, policy);
  for (const auto& u : kReorderedUnits) scope.fully_shard(u);
  schema::write_file_atomically(path, schema::dump_plan(scope.finalize()));
  return path;
}

// Where the first call of the module at `path` sits in a trace: [enter, exit + 1).
std::pair<size_t, size_t> call_span(const planner::ModelIR& ir, const std::string& path) {
  const int m = ir.find_module(path);
  size_t begin = 0;
  while (
      !(ir.trace[begin].kind == planner::CallEvent::Kind::kEnter && ir.trace[begin].module == m)) {
    ++begin;
  }
  size_t end = begin;
  while (!(ir.trace[end].kind == planner::CallEvent::Kind::kExit && ir.trace[end].module == m)) {
    ++end;
  }
  return {begin, end + 1};
}

std::vector<planner::CallEvent> events(const planner::ModelIR& ir, size_t begin, size_t end) {
  return {ir.trace.begin() + begin, ir.trace.begin() + end};
}

// `ir` with the calls of two sibling modules (enter through exit, reads included) swapped.
planner::ModelIR swap_calls(planner::ModelIR ir, const std::string& a, const std::string& b) {
  auto first = call_span(ir, a), second = call_span(ir, b);
  if (second.first < first.first) std::swap(first, second);
  std::vector<planner::CallEvent> trace = events(ir, 0, first.first);
  for (const auto& part :
       {events(ir, second.first, second.second), events(ir, first.second, second.first),
        events(ir, first.first, first.second), events(ir, second.second, ir.trace.size())}) {
    trace.insert(trace.end(), part.begin(), part.end());
  }
  ir.trace = trace;
  return ir;
}

// `ir` with one more call of `module`, just before the call of `before`.
planner::ModelIR call_early(planner::ModelIR ir, const std::string& module,
                            const std::string& before) {
  const auto call = call_span(ir, module);
  const std::vector<planner::CallEvent> extra = events(ir, call.first, call.second);
  ir.trace.insert(ir.trace.begin() + call_span(ir, before).first, extra.begin(), extra.end());
  return ir;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

struct Outcome {
  std::vector<RankResult> ranks;
  std::chrono::milliseconds wall{0};
};

// `world` parity workers training `task` for `steps` steps by `plan`, plus `flags`.
Outcome train_task(const std::string& task, const std::string& plan, int world, int steps,
                   const std::string& out, std::vector<std::string> flags,
                   std::chrono::milliseconds limit = 60s) {
  executor::StoreHost host(0);
  RankLaunch launch;
  launch.program = MFSDP_PARITY_WORKER;
  launch.args = {task,  plan, fixture_path(task_named(task).fixture), std::to_string(steps), "1",
                 "sgd", out};
  launch.args.insert(launch.args.end(), flags.begin(), flags.end());
  launch.world_size = world;
  launch.master_port = host.port();
  launch.secret = host.secret();
  launch.agent_store = true;
  launch.limit = limit;
  const auto start = Clock::now();
  Outcome run;
  run.ranks = run_ranks(launch);
  run.wall = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  return run;
}

// The same, training reordered.pt.
Outcome train_reordered(const std::string& plan, int world, int steps, const std::string& out,
                        std::vector<std::string> flags, std::chrono::milliseconds limit = 60s) {
  return train_task("reordered", plan, world, steps, out, std::move(flags), limit);
}

// A plan for reordered.pt, which runs stem, blocks.2, blocks.0, blocks.1, head, made from a
// doctored trace. The structural hash is the real model's, so the executor accepts the plan.
std::string write_doctored_plan(const std::string& dir,
                                planner::ModelIR (*doctor)(const planner::ModelIR&)) {
  const planner::ShardedModel real = planner::ShardedModel::load(fixture_path("reordered.pt"));
  planner::ShardedModel doctored(doctor(real.ir()), real.path(), real.info().sha256);
  return write_plan(doctored, 2, {}, dir + "/doctored.plan.json");
}

// The plan expects blocks.0 before blocks.2: blocks.0 arrives after its plan entries have
// passed, and no collective can be issued for it that the other ranks would match.
planner::ModelIR swapped(const planner::ModelIR& ir) {
  return swap_calls(ir, "blocks.0", "blocks.2");
}

// The plan expects blocks.0 called twice, first before blocks.2: the first call never comes,
// like a branch not taken, and the executor performs its entries anyway.
planner::ModelIR extra_call(const planner::ModelIR& ir) {
  return call_early(ir, "blocks.0", "blocks.2");
}

TEST(OrderCheck, UnitRunLaterThanPlannedStopsEveryRank) {
  const std::string dir = scratch_dir("order_late");
  const Outcome run =
      train_reordered(write_doctored_plan(dir, swapped), 2, 1, dir + "/result.pt", {});
  for (const RankResult& rank : run.ranks) {
    EXPECT_EQ(rank.exit_code, kExitRuntime) << describe(run.ranks);
    EXPECT_TRUE(contains(rank.err,
                         "mfsdp: error: rank " + std::to_string(&rank - run.ranks.data()) +
                             ": unit blocks.0 reached pre_forward later than the plan has it (the "
                             "plan had already reached post_forward blocks.2 (call 0))"))
        << describe(run.ranks);
  }
}

TEST(OrderCheck, PlannedCallThatNeverComesWarnsAndTrainsAsTheReference) {
  const std::string dir = scratch_dir("order_warn");
  const std::string out = dir + "/result.pt";
  constexpr int kSteps = 3;
  const Outcome run = train_reordered(write_doctored_plan(dir, extra_call), 2, kSteps, out, {});
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    const RankResult& rank = run.ranks[r];
    ASSERT_EQ(rank.exit_code, 0) << describe(run.ranks);
    EXPECT_TRUE(contains(rank.err, "mfsdp: warning: rank " + std::to_string(r) +
                                       ": the first microbatch's unit order differs from the "
                                       "plan: pre_forward blocks.0 (call 0) did not run before "
                                       "pre_forward blocks.2"))
        << describe(run.ranks);
    // blocks.0's pre_forward and pre_backward of call 0.
    EXPECT_TRUE(contains(rank.out, " divergences 2\n")) << describe(run.ranks);
  }
  // Every rank performed the same planned collectives, blocks.0's first gather included, so
  // only the timing differs from a faithful plan: the values are single-process training's.
  std::map<std::string, at::Tensor> params;
  std::vector<double> losses;
  load_parity_result(out, params, losses);
  const TrainingResult reference =
      train_reference(task_named("reordered"), fixture_path("reordered.pt"), kSteps, "sgd");
  ASSERT_EQ(params.size(), reference.params.size());
  for (const auto& [name, expected] : reference.params) {
    ASSERT_TRUE(params.count(name)) << name;
    EXPECT_TRUE(torch::allclose(params.at(name), expected, 1e-5, 1e-6)) << name;
  }
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(losses[s], reference.losses[s], 1e-5 * std::abs(reference.losses[s]));
  }
}

// while_loop.pt's loop turns twice on 24 rows, which a static plan cannot know: it counts one
// call, and the second fails every rank on the first step with the fix (parity_test.cpp trains
// the traced plan).
TEST(OrderCheck, ALoopTurningMoreOftenThanAStaticPlanCountsFailsNamingTheTrace) {
  const std::string dir = scratch_dir("while_loop");
  planner::ShardedModel model = planner::ShardedModel::load(fixture_path("while_loop.pt"));
  planner::ShardingScope scope(model, {2, 2, 1}, {});
  for (const char* u : {"inp", "step", "out", "<root>"}) scope.fully_shard(u);
  const std::string plan = dir + "/plan.json";
  schema::write_file_atomically(plan, schema::dump_plan(scope.finalize()));
  const Outcome run = train_task("while_loop", plan, 2, 1, dir + "/result.pt", {});
  for (const RankResult& rank : run.ranks) {
    EXPECT_EQ(rank.exit_code, kExitRuntime) << describe(run.ranks);
    EXPECT_TRUE(contains(rank.err,
                         "unit step reached pre_forward more often than the plan counts (1 per "
                         "microbatch); unit "
                         "step is called under data-dependent control flow (a loop), which a "
                         "static plan cannot count: re-plan with `mfsdp plan --trace-input "
                         "SHAPE`"))
        << describe(run.ranks);
  }
}

TEST(OrderCheck, PlannedCallThatNeverComesFailsEveryRankUnderStrictOrder) {
  const std::string dir = scratch_dir("order_strict");
  const Outcome run = train_reordered(write_doctored_plan(dir, extra_call), 2, 1,
                                      dir + "/result.pt", {"--strict-order"});
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    const RankResult& rank = run.ranks[r];
    EXPECT_EQ(rank.exit_code, kExitRuntime) << describe(run.ranks);
    EXPECT_TRUE(contains(rank.err, "mfsdp: error: rank " + std::to_string(r) +
                                       ": the first microbatch's unit order differs from the "
                                       "plan: pre_forward blocks.0 (call 0) did not run"))
        << describe(run.ranks);
    EXPECT_TRUE(contains(rank.err,
                         "; re-plan with the real unit order, or allow skipped calls "
                         "(strict_order off)"))
        << describe(run.ranks);
  }
}

TEST(PlanCheck, RankGivenAnotherPlanFailsEveryRankBeforeTraining) {
  const std::string dir = scratch_dir("plan_mismatch");
  planner::ShardedModel model = planner::ShardedModel::load(fixture_path("reordered.pt"));
  const std::string plan = write_plan(model, 2, {}, dir + "/plan.json");
  planner::ShardedModel same_model = planner::ShardedModel::load(fixture_path("reordered.pt"));
  schema::Policy no_prefetch;
  no_prefetch.forward_prefetch = 0;
  no_prefetch.backward_prefetch = 0;
  const std::string other = write_plan(same_model, 2, no_prefetch, dir + "/no_prefetch.plan.json");

  const Outcome run =
      train_reordered(plan, 2, 1, dir + "/result.pt", {"--plan-for-rank", "1", other});
  for (const RankResult& rank : run.ranks) {
    EXPECT_EQ(rank.exit_code, kExitUsage) << describe(run.ranks);
    EXPECT_TRUE(contains(rank.err,
                         "mfsdp: error: rank(s) 1 were given a different plan or model than rank "
                         "0; give every rank the same plan and model files\n"))
        << describe(run.ranks);
    EXPECT_TRUE(rank.out.empty()) << describe(run.ranks);
  }
}

TEST(DeadRank, OthersFailNamingACollectiveWithinTheTimeout) {
  const std::string dir = scratch_dir("dead_rank");
  planner::ShardedModel model = planner::ShardedModel::load(fixture_path("reordered.pt"));
  const std::string plan = write_plan(model, 3, {}, dir + "/plan.json");
  const auto timeout = 5s;
  const Outcome run = train_reordered(plan, 3, 3, dir + "/result.pt",
                                      {"--die-at-step", "1", "--die-rank", "1", "--timeout-ms",
                                       std::to_string(std::chrono::milliseconds(timeout).count())},
                                      60s);
  EXPECT_EQ(run.ranks[1].exit_code, 9) << describe(run.ranks);
  for (int r : {0, 2}) {
    const RankResult& rank = run.ranks[r];
    EXPECT_EQ(rank.signal, 0) << "rank " << r << " had to be killed\n" << describe(run.ranks);
    EXPECT_EQ(rank.exit_code, kExitRuntime) << describe(run.ranks);
    const std::string prefix = "mfsdp: error: rank " + std::to_string(r) + ": ";
    EXPECT_TRUE(contains(rank.err, prefix)) << describe(run.ranks);
    EXPECT_TRUE(contains(rank.err, "all-gather of") || contains(rank.err, "reduce-scatter of") ||
                contains(rank.err, "failed"))
        << describe(run.ranks);
  }
  // A dead peer's connections close with it, so the others fail at once rather than after the
  // timeout; the slack is for start-up on a busy machine.
  EXPECT_LT(run.wall, timeout + 10s) << describe(run.ranks);
}

}  // namespace
}  // namespace mfsdp::testing
