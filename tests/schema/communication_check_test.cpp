// check_plan's communication rules: totals recounted from the schedule's actions.

#include <gtest/gtest.h>

#include "sample_plan.h"
#include "schema/plan_check.h"

namespace mfsdp::schema {
namespace {

using Lines = std::vector<std::string>;

Lines check(const Plan& plan) {
  return problem_lines(check_plan(plan));
}

TEST(CommunicationCheck, CountsAllGatherActions) {
  Plan plan = sample_plan();
  plan.communication.all_gather_count = 3;
  plan.communication.all_gather_bytes = 481;
  EXPECT_EQ(check(plan),
            (Lines{"communication.all_gather_count: is 3, expected 5 (the schedule's all_gather "
                   "actions)",
                   "communication.all_gather_bytes: is 481, expected 480 (Σ unsharded_bytes of "
                   "the all-gathered units)"}));
}

TEST(CommunicationCheck, CountsReduceScatterActions) {
  Plan plan = sample_plan();
  plan.communication.reduce_scatter_count = 1;
  plan.communication.reduce_scatter_bytes = 192;
  EXPECT_EQ(check(plan),
            (Lines{"communication.reduce_scatter_count: is 1, expected 2 (the schedule's "
                   "reduce_scatter actions)",
                   "communication.reduce_scatter_bytes: is 192, expected 384 (Σ gradient groups' "
                   "padded_numel × reduce dtype size per reduce-scatter)"}));
}

TEST(CommunicationCheck, AllReduceMovesGradientShardsAcrossReplicas) {
  Plan plan = sample_plan();
  plan.communication.all_reduce_bytes = 384;
  EXPECT_EQ(check(plan),
            Lines{"communication.all_reduce_bytes: is 384, expected 192 (Σ gradient "
                  "groups' shard_numel × main gradient dtype size per reduce-scatter)"});
}

TEST(CommunicationCheck, NoAllReduceWithoutReplicas) {
  Plan plan = sample_plan();
  plan.mesh.world_size = 2;
  plan.mesh.replicate_size = 1;
  EXPECT_EQ(check(plan), Lines{"communication.all_reduce_bytes: is 192, expected 0 (no all-reduce "
                               "without replicas)"});
  plan.communication.all_reduce_bytes = 0;
  EXPECT_EQ(check(plan), Lines{});
}

}  // namespace
}  // namespace mfsdp::schema
