// dtype helpers and the derived-field arithmetic that the planner and check_plan share.

#include "schema/plan_rules.h"

#include <gtest/gtest.h>

#include "sample_plan.h"
#include "schema/error.h"

namespace mfsdp::schema {
namespace {

TEST(PlanRules, KnowsTheDtypeSizes) {
  EXPECT_EQ(dtype_names(),
            (std::vector<std::string>{"float32", "float64", "float16", "bfloat16", "int64", "int32",
                                      "int16", "int8", "uint8", "bool"}));
  std::vector<int64_t> sizes;
  for (const std::string& name : dtype_names()) sizes.push_back(dtype_size(name));
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 8, 2, 2, 8, 4, 2, 1, 1, 1}));
}

TEST(PlanRules, OnlyTheFourFloatDtypesAreFloating) {
  std::vector<std::string> floating;
  for (const std::string& name : dtype_names()) {
    if (is_floating_dtype(name)) floating.push_back(name);
  }
  EXPECT_EQ(floating, (std::vector<std::string>{"float32", "float64", "float16", "bfloat16"}));
  EXPECT_FALSE(is_floating_dtype("complex64"));
}

TEST(PlanRules, UnknownDtypeIsAUsageError) {
  try {
    dtype_size("complex64");
    FAIL() << "expected mfsdp::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kUsage);
    EXPECT_STREQ(error.what(),
                 "unknown dtype 'complex64'; mfsdp knows: float32, float64, "
                 "float16, bfloat16, int64, int32, int16, int8, uint8, bool");
  }
}

TEST(PlanRules, ParamDtypeAppliesToFloatingGroupsOnly) {
  Policy policy;
  policy.param_dtype = "bfloat16";
  EXPECT_EQ(compute_dtype(policy, "float32"), "bfloat16");
  EXPECT_EQ(compute_dtype(policy, "int64"), "int64");
  policy.param_dtype.reset();
  EXPECT_EQ(compute_dtype(policy, "float32"), "float32");
}

TEST(PlanRules, AlignmentUsesTheSmallerOfStorageAndComputeDtype) {
  Policy policy;
  policy.align_bytes = 16;
  policy.param_dtype = "bfloat16";
  EXPECT_EQ(align_elems(policy, "float32"), 8);  // 16 / min(4, 2)
  EXPECT_EQ(align_elems(policy, "int64"), 2);    // 16 / 8
  policy.param_dtype = "float64";
  EXPECT_EQ(align_elems(policy, "float32"), 4);  // 16 / min(4, 8)
  policy.align_bytes = 1;
  EXPECT_EQ(align_elems(policy, "float32"), 1);  // never below one element
}

TEST(PlanRules, PaddedNumelRoundsUpToShardTimesAlignment) {
  EXPECT_EQ(padded_numel(19, 2, 8), 32);
  EXPECT_EQ(padded_numel(32, 2, 8), 32);
  EXPECT_EQ(padded_numel(0, 2, 8), 0);
  EXPECT_EQ(padded_numel(1, 3, 1), 3);
}

TEST(PlanRules, UnitTotalsMatchTheSample) {
  const Plan plan = sample_plan();
  const Unit& root = plan.units[0];
  EXPECT_EQ(unit_unsharded_bytes(plan.policy, root), 96);
  EXPECT_EQ(unit_sharded_bytes(root), 80);
  EXPECT_EQ(unit_reduce_scatter_bytes(plan.policy, root), 128);  // the int64 group has no grad
  EXPECT_EQ(unit_gradient_shard_bytes(plan.policy, root), 64);
  EXPECT_EQ(unit_reduce_scatter_bytes(plan.policy, plan.units[1]), 0);  // frozen
}

TEST(PlanRules, GradientNeedsRequiresGradAndAFloatingDtype) {
  EXPECT_TRUE(has_gradient({"bfloat16", true, 0, 0, 0, {}}));
  EXPECT_FALSE(has_gradient({"bfloat16", false, 0, 0, 0, {}}));
  EXPECT_FALSE(has_gradient({"int64", true, 0, 0, 0, {}}));
}

TEST(PlanRules, StreamsFollowThePolicy) {
  Policy policy;
  const std::vector<Stream> two = expected_streams(policy);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].name, "all_gather");
  EXPECT_EQ(two[0].collectives, std::vector<std::string>{"all_gather"});
  EXPECT_EQ(two[1].name, "reduce_scatter");
  EXPECT_EQ(two[1].collectives, (std::vector<std::string>{"reduce_scatter", "all_reduce"}));
  policy.unified_stream = true;
  const std::vector<Stream> one = expected_streams(policy);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].name, "unified");
  EXPECT_EQ(one[0].collectives,
            (std::vector<std::string>{"all_gather", "reduce_scatter", "all_reduce"}));
}

TEST(PlanRules, PointNamesAppendTheCallAfterTheFirst) {
  ScheduleEntry entry;
  entry.point = "pre_forward";
  entry.unit = "layers.3";
  EXPECT_EQ(schedule_point_name(entry), "pre_forward layers.3");
  entry.point = "pre_backward";
  entry.unit = "shared";
  entry.call = 1;
  EXPECT_EQ(schedule_point_name(entry), "pre_backward shared#1");
  entry.point = "end_of_backward";
  entry.unit.reset();
  entry.call = 0;
  EXPECT_EQ(schedule_point_name(entry), "end_of_backward");
}

}  // namespace
}  // namespace mfsdp::schema
