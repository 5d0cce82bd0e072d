#include <gtest/gtest.h>

#include "planner/sharding_scope.h"
#include "schema/plan_check.h"
#include "tests/planner/ir_builder.h"
#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

using testing::chain_model;
using Names = std::vector<std::string>;

// Units a, b, c called in order; 8 float32 elements each over 2 shards: 32 gathered bytes each.
schema::Plan chain_plan(schema::Policy policy) {
  ShardedModel model(chain_model({"a", "b", "c"}, 8), "chain.pt", "0");
  ShardingScope scope(model, {2, 2, 1}, policy);
  for (const char* u : {"a", "b", "c"}) scope.fully_shard(u);
  return scope.finalize();
}

std::string describe(const schema::ScheduleEntry& e) {
  auto list = [](const char* what, const Names& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? std::string(" ") + what + ":" : ",") + n;
    return out;
  };
  return e.point + (e.unit ? " " + *e.unit : "") + list("ag", e.all_gather) + list("wait", e.wait) +
         list("reshard", e.reshard) + list("rs", e.reduce_scatter) +
         " live:" + std::to_string(e.unsharded_bytes);
}

Names describe_all(const schema::Plan& plan) {
  Names out;
  for (const auto& e : plan.schedule) out.push_back(describe(e));
  return out;
}

TEST(Schedule, PrefetchOneAheadAndKeepTheLastUnitForBackward) {
  const schema::Plan plan = chain_plan({});
  EXPECT_EQ(describe_all(plan), (Names{
                                    "pre_forward a ag:a,b wait:a live:64",
                                    "post_forward a reshard:a live:64",
                                    "pre_forward b ag:c wait:b live:64",
                                    "post_forward b reshard:b live:64",
                                    "pre_forward c wait:c live:32",
                                    "post_forward c live:32",
                                    "pre_backward c ag:b live:64",
                                    "post_backward c reshard:c rs:c live:64",
                                    "pre_backward b ag:a wait:b live:64",
                                    "post_backward b reshard:b rs:b live:64",
                                    "pre_backward a wait:a live:32",
                                    "post_backward a reshard:a rs:a live:32",
                                    "end_of_backward live:0",
                                }));
  EXPECT_TRUE(plan.units[2].kept_after_forward);
  EXPECT_FALSE(plan.units[0].kept_after_forward);
  EXPECT_EQ(plan.memory.peak_unsharded_bytes, 64);
  EXPECT_EQ(plan.memory.peak_at, "pre_forward a");
  EXPECT_EQ(plan.communication.all_gather_count, 5);
  EXPECT_EQ(plan.communication.all_gather_bytes, 160);
  EXPECT_EQ(plan.communication.reduce_scatter_count, 3);
  EXPECT_EQ(plan.communication.reduce_scatter_bytes, 96);
  EXPECT_EQ(plan.communication.all_reduce_bytes, 0);
  EXPECT_EQ(plan.memory.sharded_param_bytes, 3 * 16);
  EXPECT_EQ(plan.memory.sharded_grad_bytes, 3 * 16);
  EXPECT_EQ(schema::check_plan(plan).size(), 0u);
}

TEST(Schedule, NoPrefetchGathersOnDemandOnly) {
  schema::Policy policy;
  policy.forward_prefetch = 0;
  policy.backward_prefetch = 0;
  const schema::Plan plan = chain_plan(policy);
  EXPECT_EQ(plan.schedule[0].all_gather, Names{"a"});
  EXPECT_EQ(plan.schedule[2].all_gather, Names{"b"});
  EXPECT_EQ(plan.memory.peak_unsharded_bytes, 32);
  EXPECT_EQ(schema::check_plan(plan).size(), 0u);
}

TEST(Schedule, DeeperPrefetchIssuesSeveralAhead) {
  schema::Policy policy;
  policy.forward_prefetch = 2;
  const schema::Plan plan = chain_plan(policy);
  EXPECT_EQ(plan.schedule[0].all_gather, (Names{"a", "b", "c"}));
  EXPECT_EQ(plan.memory.peak_unsharded_bytes, 96);
  EXPECT_EQ(schema::check_plan(plan).size(), 0u);
}

TEST(Schedule, ResidentBudgetHoldsBackPrefetch) {
  schema::Policy policy;
  policy.resident_budget_bytes = 40;
  const schema::Plan plan = chain_plan(policy);
  EXPECT_EQ(plan.schedule[0].all_gather, Names{"a"});
  EXPECT_EQ(plan.memory.peak_unsharded_bytes, 32);
  EXPECT_EQ(schema::check_plan(plan).size(), 0u);
}

TEST(Schedule, ResidentBudgetBelowOneUnitFails) {
  schema::Policy policy;
  policy.resident_budget_bytes = 20;
  EXPECT_MFSDP_ERROR(chain_plan(policy), ExitCode::kPlanning,
                     "resident budget 20 bytes is too small: the schedule needs 32 bytes");
}

TEST(Schedule, NoReshardAfterForwardKeepsEverythingForBackward) {
  schema::Policy policy;
  policy.reshard_after_forward = false;
  const schema::Plan plan = chain_plan(policy);
  for (const auto& e : plan.schedule) {
    if (e.phase == "forward") {
      EXPECT_TRUE(e.reshard.empty()) << describe(e);
    } else {
      EXPECT_TRUE(e.all_gather.empty()) << describe(e);
    }
  }
  EXPECT_EQ(plan.memory.peak_unsharded_bytes, 96);
  EXPECT_EQ(plan.communication.all_gather_count, 3);
  EXPECT_EQ(schema::check_plan(plan).size(), 0u);
}

TEST(Schedule, UnitCalledTwiceStaysGatheredAndReducesOnce) {
  testing::IrBuilder b;
  for (const char* m : {"inp", "shared", "out"}) {
    b.module(m);
    b.param(m, "w", {8});
  }
  b.call("inp").call("shared").call("out").call("shared");
  ShardedModel model = b.model();
  schema::Policy policy;
  policy.forward_prefetch = 0;
  policy.backward_prefetch = 0;
  ShardingScope scope(model, {2, 2, 1}, policy);
  for (const char* u : {"inp", "shared", "out"}) scope.fully_shard(u);
  const schema::Plan plan = scope.finalize();
  EXPECT_EQ(describe_all(plan), (Names{
                                    "pre_forward inp ag:inp wait:inp live:32",
                                    "post_forward inp reshard:inp live:32",
                                    "pre_forward shared ag:shared wait:shared live:32",
                                    "post_forward shared live:32",
                                    "pre_forward out ag:out wait:out live:64",
                                    "post_forward out reshard:out live:64",
                                    "pre_forward shared live:32",
                                    "post_forward shared live:32",
                                    "pre_backward shared live:32",
                                    "post_backward shared live:32",
                                    "pre_backward out ag:out wait:out live:64",
                                    "post_backward out reshard:out rs:out live:64",
                                    "pre_backward shared live:32",
                                    "post_backward shared reshard:shared rs:shared live:32",
                                    "pre_backward inp ag:inp wait:inp live:32",
                                    "post_backward inp reshard:inp rs:inp live:32",
                                    "end_of_backward live:0",
                                }));
  EXPECT_EQ(plan.schedule[6].call, 1);
  EXPECT_EQ(plan.memory.peak_at, "pre_forward out");
  EXPECT_EQ(schema::check_plan(plan).size(), 0u);
}

TEST(Schedule, SlotsNeverHoldTwoLiveUnits) {
  const schema::Plan plan = chain_plan({});
  ASSERT_EQ(plan.memory.slots.size(), 2u);
  EXPECT_EQ(plan.memory.slots[0].units, (Names{"a", "c"}));
  EXPECT_EQ(plan.memory.slots[1].units, Names{"b"});
  EXPECT_EQ(plan.memory.slot_bytes, 64);
}

TEST(Schedule, FrozenUnitIsGatheredButNotReduced) {
  testing::IrBuilder b;
  b.module("frozen").module("live");
  b.param("frozen", "w", {8}, "float32", false);
  b.param("live", "w", {8});
  b.call("frozen").call("live");
  ShardedModel model = b.model();
  ShardingScope scope(model, {2, 2, 1}, {});
  scope.fully_shard("frozen");
  scope.fully_shard("live");
  const schema::Plan plan = scope.finalize();
  EXPECT_EQ(plan.communication.reduce_scatter_count, 1);
  EXPECT_EQ(plan.memory.sharded_grad_bytes, 16);
  EXPECT_EQ(schema::check_plan(plan).size(), 0u);
}

TEST(Schedule, ReplicasAllReduceShardedGradients) {
  ShardedModel model(chain_model({"a", "b"}, 8), "chain.pt", "0");
  ShardingScope scope(model, {4, 2, 2}, {});
  scope.fully_shard("a");
  scope.fully_shard("b");
  const schema::Plan plan = scope.finalize();
  EXPECT_EQ(plan.communication.all_reduce_bytes, 2 * 16);
  EXPECT_EQ(schema::check_plan(plan).size(), 0u);
}

TEST(Schedule, UnifiedStreamPolicyNamesOneStream) {
  schema::Policy policy;
  policy.unified_stream = true;
  const schema::Plan plan = chain_plan(policy);
  ASSERT_EQ(plan.streams.size(), 1u);
  EXPECT_EQ(plan.streams[0].name, "unified");
}

}  // namespace
}  // namespace mfsdp::planner
