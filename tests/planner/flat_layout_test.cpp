#include <gtest/gtest.h>

#include "planner/sharding_scope.h"
#include "tests/planner/ir_builder.h"

namespace mfsdp::planner {
namespace {

using testing::IrBuilder;

// Unit "a" holds float32 parameters of 10 and 3 elements, a frozen float32 one of 6 and a
// bfloat16 one of 5, defined in that order.
schema::Unit plan_unit_a(int64_t shards, schema::Policy policy = {}) {
  IrBuilder b;
  b.module("a");
  b.param("a", "w", {2, 5});
  b.param("a", "b", {3});
  b.param("a", "frozen", {6}, "float32", false);
  b.param("a", "half", {5}, "bfloat16");
  b.call("a");
  ShardedModel model = b.model();
  ShardingScope scope(model, {shards, shards, 1}, policy);
  scope.fully_shard("a");
  return scope.finalize().units.at(0);
}

TEST(FlatLayout, GroupsByDtypeAndRequiresGradInFirstUseOrder) {
  const schema::Unit a = plan_unit_a(3);
  ASSERT_EQ(a.groups.size(), 3u);
  EXPECT_EQ(a.groups[0].dtype, "float32");
  EXPECT_TRUE(a.groups[0].requires_grad);
  EXPECT_EQ(a.groups[1].dtype, "float32");
  EXPECT_FALSE(a.groups[1].requires_grad);
  EXPECT_EQ(a.groups[2].dtype, "bfloat16");
  EXPECT_EQ(a.groups[0].params.size(), 2u);
  EXPECT_EQ(a.groups[0].params[1].name, "a.b");
  EXPECT_EQ(a.groups[0].params[0].shape, (std::vector<int64_t>{2, 5}));
}

TEST(FlatLayout, OffsetsAlignTo16BytesAndPaddingSplitsEvenlyAcrossThreeRanks) {
  const schema::Unit a = plan_unit_a(3);
  const schema::Group& g = a.groups[0];
  EXPECT_EQ(g.params[0].offset, 0);
  EXPECT_EQ(g.params[1].offset, 12);  // 10 rounded up to 4 float32 elements
  EXPECT_EQ(g.numel, 15);
  EXPECT_EQ(g.padded_numel, 24);  // multiple of 3 ranks x 4 elements
  EXPECT_EQ(g.shard_numel, 8);    // rank r owns [8r, 8r + 8)
  const schema::Group& half = a.groups[2];
  EXPECT_EQ(half.numel, 5);
  EXPECT_EQ(half.padded_numel, 24);  // 3 ranks x 8 bfloat16 elements
  EXPECT_EQ(half.shard_numel, 8);
}

TEST(FlatLayout, OneRankOnlyAligns) {
  const schema::Unit a = plan_unit_a(1);
  EXPECT_EQ(a.groups[0].padded_numel, 16);
  EXPECT_EQ(a.groups[0].shard_numel, 16);
  EXPECT_EQ(a.groups[1].padded_numel, 8);
  EXPECT_EQ(a.groups[2].padded_numel, 8);
}

TEST(FlatLayout, EightRanksPadToThirtyTwo) {
  const schema::Unit a = plan_unit_a(8);
  EXPECT_EQ(a.groups[0].padded_numel, 32);
  EXPECT_EQ(a.groups[0].shard_numel, 4);
  EXPECT_EQ(a.groups[1].padded_numel, 32);
  EXPECT_EQ(a.groups[2].padded_numel, 64);
  EXPECT_EQ(a.groups[2].shard_numel, 8);
}

TEST(FlatLayout, UnitBytesCountShardsInStorageDtypeAndGatheredInComputeDtype) {
  const schema::Unit a = plan_unit_a(3);
  // The frozen group: 6 elements pad to 12 (3 ranks x 4), 4 per shard.
  EXPECT_EQ(a.sharded_bytes, 8 * 4 + 4 * 4 + 8 * 2);
  EXPECT_EQ(a.unsharded_bytes, 24 * 4 + 12 * 4 + 24 * 2);
}

TEST(FlatLayout, BfloatComputeDtypeAlignsForTheSmallerElement) {
  schema::Policy policy;
  policy.param_dtype = "bfloat16";
  const schema::Unit a = plan_unit_a(3, policy);
  const schema::Group& g = a.groups[0];
  EXPECT_EQ(g.params[1].offset, 16);  // 16 bytes of bfloat16 = 8 elements
  EXPECT_EQ(g.numel, 19);
  EXPECT_EQ(g.padded_numel, 24);
  EXPECT_EQ(a.unsharded_bytes, (24 + 24 + 24) * 2);
  EXPECT_EQ(a.sharded_bytes, 8 * 4 + 8 * 4 + 8 * 2);
}

TEST(FlatLayout, TiedParameterIsLaidOutOnceWithItsAliases) {
  IrBuilder b;
  b.module("embed").module("head");
  const int w = b.param("embed", "weight", {4, 4});
  b.tie(w, "head", "weight");
  b.call("embed").call("head");
  ShardedModel model = b.model();
  ShardingScope scope(model, {2, 2, 1}, {});
  scope.fully_shard("<root>");
  const schema::Plan plan = scope.finalize();
  ASSERT_EQ(plan.units[0].groups.size(), 1u);
  ASSERT_EQ(plan.units[0].groups[0].params.size(), 1u);
  EXPECT_EQ(plan.units[0].groups[0].params[0].name, "embed.weight");
  EXPECT_EQ(plan.units[0].groups[0].params[0].aliases, std::vector<std::string>{"head.weight"});
  EXPECT_EQ(plan.model.parameters, 1);
}

}  // namespace
}  // namespace mfsdp::planner
