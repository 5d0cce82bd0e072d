// The context against a recording runtime (recording_runtime.h), in one process: which
// collectives it issues for a plan, in which order, what it waits for, and how it fails. The
// multi-process suites (parity, executor_failure_test) check the same context over Gloo.
#include "executor/runtime/context.h"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "executor/runtime/context_impl.h"
#include "planner/sharding_scope.h"
#include "predict/simulate.h"
#include "schema/plan_json.h"
#include "tests/executor/runtime/one_rank_world.h"
#include "tests/executor/runtime/recording_runtime.h"
#include "tests/executor/train/error_of.h"

namespace mfsdp::executor {
namespace {

using testing::RuntimeRecord;
using Names = std::vector<std::string>;

std::string fixture(const std::string& name) {
  return std::string(MFSDP_SOURCE_DIR) + "/tests/fixtures/" + name;
}

// tied_lm (two transformer layers, tied embedding and head) for one rank.
std::string one_rank_plan(schema::Policy policy = {}) {
  const std::string dir = ::testing::TempDir() + "/context_test_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  planner::ShardedModel model = planner::ShardedModel::load(fixture("tied_lm.pt"));
  planner::ShardingScope scope(model, {1, 1, 1}, std::move(policy));
  for (const char* unit : {"layers.0", "layers.1", "<root>"}) scope.fully_shard(unit);
  const std::string path = dir + "/plan.json";
  schema::write_file_atomically(path, schema::dump_plan(scope.finalize()));
  return path;
}

// A rank of a world of one (one_rank_world.h) whose context records into `record`.
struct OneRank {
  OneRankWorld world;
  std::shared_ptr<RuntimeRecord> record = std::make_shared<RuntimeRecord>();

  std::unique_ptr<Context> create(const std::string& plan) {
    return create_context(plan, fixture("tied_lm.pt"), world.env, {},
                          [record = record](const schema::Plan& p, const LaunchEnv&, Rendezvous&,
                                            const RuntimeOptions&) {
                            return testing::make_recording_runtime(p, record);
                          });
  }
};

at::Tensor tokens() {
  return at::arange(2 * 8, at::kLong).reshape({2, 8}) % 256;
}

void train_step(Context& ctx) {
  ctx.microbatch(true);
  const at::Tensor logits = ctx.forward({tokens()}).toTensor();
  ctx.backward(logits.pow(2).mean());
}

// The all-gathers the plan's schedule lists, entry by entry, one per group of each unit.
Names planned_gathers(const schema::Plan& plan, const std::string& phase) {
  Names out;
  for (const schema::ScheduleEntry& entry : plan.schedule) {
    if (entry.phase != phase) continue;
    for (const std::string& name : entry.all_gather) {
      for (const schema::Unit& unit : plan.units) {
        if (unit.name != name) continue;
        for (size_t g = 0; g < unit.groups.size(); ++g) {
          out.push_back("all-gather of " + name + " group " + std::to_string(g));
        }
      }
    }
  }
  return out;
}

Names concat(Names a, const Names& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The message of the mfsdp::Error `f` throws, which must carry `expected`.
std::string message_of(const std::function<void()>& f, ExitCode expected) {
  const Error e = mfsdp::testing::error_of(f);
  EXPECT_EQ(e.code(), expected) << e.what();
  return e.what();
}

TEST(Context, AStepGathersWhatThePlansScheduleListsInItsOrder) {
  OneRank rank;
  const std::string plan_path = one_rank_plan();
  auto ctx = rank.create(plan_path);
  const schema::Plan& plan = ctx->plan();
  const Names expected =
      concat(planned_gathers(plan, "forward"), planned_gathers(plan, "backward"));
  ASSERT_FALSE(expected.empty());
  train_step(*ctx);
  EXPECT_EQ(rank.record->of("all_gather"), expected);
  // The next step does the same again: nothing is left over from the first.
  rank.record->calls.clear();
  train_step(*ctx);
  EXPECT_EQ(rank.record->of("all_gather"), expected);
}

TEST(Context, ComputeWaitsForEveryGatherBeforeTheUnitIsGatheredAgain) {
  OneRank rank;
  auto ctx = rank.create(one_rank_plan());
  train_step(*ctx);
  for (const schema::Unit& unit : ctx->plan().units) {
    std::string sequence;
    for (const std::string& call : rank.record->calls) {
      if (call.rfind("all_gather all-gather of " + unit.name + " group 0", 0) == 0) sequence += "G";
      if (call == "wait all-gather of " + unit.name) sequence += "W";
    }
    ASSERT_FALSE(sequence.empty()) << unit.name;
    for (size_t i = 0; i < sequence.size(); ++i) {
      EXPECT_EQ(sequence[i], i % 2 == 0 ? 'G' : 'W') << unit.name << ": " << sequence;
    }
    EXPECT_EQ(sequence.back(), 'W') << unit.name << ": " << sequence;
  }
}

TEST(Context, EachGroupIsReduceScatteredOnceInThePlansOrderAndBackwardWaitsForThem) {
  OneRank rank;
  auto ctx = rank.create(one_rank_plan());
  train_step(*ctx);
  const schema::Plan& plan = ctx->plan();
  Names expected;
  for (const schema::ScheduleEntry& entry : plan.schedule) {
    for (const std::string& name : entry.reduce_scatter) {
      for (const schema::Unit& unit : plan.units) {
        if (unit.name != name) continue;
        for (size_t g = 0; g < unit.groups.size(); ++g) {
          expected.push_back("reduce-scatter of " + name + " group " + std::to_string(g));
        }
      }
    }
  }
  Names whole;  // a tied weight's early part is extra, named as such
  for (const std::string& what : rank.record->of("reduce_scatter")) {
    if (what.find("(early") == std::string::npos) whole.push_back(what);
  }
  EXPECT_EQ(whole, expected);
  ASSERT_FALSE(rank.record->calls.empty());
  EXPECT_EQ(rank.record->calls.back(), "wait reduce-scatters");
}

// Compute waits for the reduce-scatters where the main gradients are read: after a step's
// last microbatch, and in zero_grad and clip_grad_norm. An earlier microbatch's stay in
// flight under the next microbatch's forward.
TEST(Context, OnlyTheLastMicrobatchsBackwardWaitsForTheReduceScatters) {
  OneRank rank;
  auto ctx = rank.create(one_rank_plan());
  auto waits = [&] {
    int n = 0;
    for (const std::string& call : rank.record->calls) n += call == "wait reduce-scatters";
    return n;
  };
  for (int m = 0; m < 3; ++m) {
    ctx->microbatch(m == 2);
    const at::Tensor logits = ctx->forward({tokens()}).toTensor();
    ctx->backward(logits.pow(2).mean());
    EXPECT_FALSE(rank.record->of("reduce_scatter").empty());
    EXPECT_EQ(waits(), m == 2 ? 1 : 0) << "after microbatch " << m;
  }
  EXPECT_EQ(rank.record->calls.back(), "wait reduce-scatters");
  ctx->clip_grad_norm(1.0);
  EXPECT_EQ(waits(), 2);
  ctx->zero_grad();
  EXPECT_EQ(waits(), 3);
}

// The simulator (predict/simulate.h) predicts from the same schedule semantics the context
// runs: over two microbatches, it issues the same collectives in the same order, and waits
// for the reduce-scatters exactly once.
TEST(Context, IssuesTheCollectivesTheSimulatorReplaysInTheSameOrder) {
  OneRank rank;
  auto ctx = rank.create(one_rank_plan());
  for (int m = 0; m < 2; ++m) {
    ctx->microbatch(m == 1);
    const at::Tensor logits = ctx->forward({tokens()}).toTensor();
    ctx->backward(logits.pow(2).mean());
  }
  Names ran;  // tied_lm's units have one group each: "all-gather of layers.0 group 0"
  for (const std::string& call : rank.record->calls) {
    const auto group = call.find(" group ");
    if (call.rfind("all_gather ", 0) == 0 || call.rfind("reduce_scatter ", 0) == 0) {
      if (call.find("(early") == std::string::npos) ran.push_back(call.substr(0, group));
    }
  }
  predict::StepCosts costs;
  costs.all_gather.latency_us = costs.reduce_scatter.latency_us = 1;
  const predict::Prediction predicted = predict::simulate_step(ctx->plan(), costs, 2);
  Names replayed;
  for (const predict::PredictedSpan& span : predicted.timeline) {
    if (span.track == "compute") continue;
    const bool gather = span.name.rfind("all-gather", 0) == 0;
    replayed.push_back(std::string(gather ? "all_gather " : "reduce_scatter ") + span.name);
  }
  EXPECT_EQ(ran, replayed);
  int waits = 0;
  for (const predict::PredictedSpan& span : predicted.timeline) {
    waits += span.name == "wait for reduce-scatters";
  }
  EXPECT_EQ(waits, 1);
}

TEST(Context, GradientsReachTheMainGradientsThroughTheRuntime) {
  OneRank rank;
  auto ctx = rank.create(one_rank_plan());
  train_step(*ctx);
  ctx->sync_gradients();
  double norm = 0;
  for (const at::Tensor& shard : ctx->sharded_parameters()) {
    ASSERT_TRUE(shard.grad().defined());
    norm += shard.grad().pow(2).sum().item<double>();
  }
  EXPECT_GT(norm, 0);
  ctx->zero_grad();
  for (const at::Tensor& shard : ctx->sharded_parameters()) {
    EXPECT_EQ(shard.grad().abs().sum().item<double>(), 0);
  }
}

TEST(Context, EvaluateGathersInForwardOrderReducesNothingAndTrainingGoesOn) {
  OneRank rank;
  auto ctx = rank.create(one_rank_plan());
  ctx->evaluate({tokens()});
  const schema::Plan& plan = ctx->plan();
  EXPECT_EQ(rank.record->of("all_gather"), planned_gathers(plan, "forward"));
  EXPECT_TRUE(rank.record->of("reduce_scatter").empty());
  rank.record->calls.clear();
  train_step(*ctx);
  EXPECT_EQ(rank.record->of("all_gather"),
            concat(planned_gathers(plan, "forward"), planned_gathers(plan, "backward")));
}

TEST(Context, AFailedAllGatherFailsTheStepAndEveryLaterCall) {
  OneRank rank;
  rank.record->fail_on = "all-gather of layers.1";
  auto ctx = rank.create(one_rank_plan());
  const std::string first = message_of([&] { train_step(*ctx); }, ExitCode::kRuntime);
  EXPECT_NE(first.find("all-gather of layers.1 group 0 failed: injected failure"),
            std::string::npos)
      << first;
  const std::string later = message_of([&] { train_step(*ctx); }, ExitCode::kRuntime);
  EXPECT_NE(later.find("this context failed earlier and cannot continue"), std::string::npos)
      << later;
  EXPECT_NE(later.find("injected failure"), std::string::npos) << later;
}

// float16 compute without a loss scaler would underflow gradients silently: refused at
// creation, with the dtype to plan instead.
TEST(Context, Float16ComputeIsRefusedForWantOfLossScaling) {
  schema::Policy policy;
  policy.param_dtype = "float16";
  const std::string plan = one_rank_plan(policy);
  OneRank rank;
  const std::string message = message_of([&] { rank.create(plan); }, ExitCode::kUsage);
  EXPECT_EQ(message, plan +
                         ": param dtype float16 needs loss scaling, which mfsdp does not do yet; "
                         "plan with --param-dtype bfloat16 (the same memory, float32's range) or "
                         "float32");
}

TEST(Context, ASecondForwardBeforeBackwardIsAUsageError) {
  OneRank rank;
  auto ctx = rank.create(one_rank_plan());
  ctx->microbatch(true);
  ctx->forward({tokens()});
  const std::string message = message_of([&] { ctx->forward({tokens()}); }, ExitCode::kUsage);
  EXPECT_NE(message.find("reached pre_forward after the plan's forward was complete"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace mfsdp::executor
