// dtype helpers and the derived-field arithmetic that the planner and check_plan share.

#include "schema/plan_rules.h"

#include <functional>

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

// The error padded_numel or a unit total throws: a planning error, not a wrapped number.
std::string overflow_error(const std::function<void()>& compute) {
  try {
    compute();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kPlanning);
    return error.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(PlanRules, PaddingThatOverflowsIsAPlanningErrorNotADivisionByZero) {
  // 2^62 × 4 wraps to 0, which the multiple would have been divided by.
  EXPECT_EQ(overflow_error([] { padded_numel(1, int64_t{1} << 62, 4); }),
            "numel 1 padded to a multiple of shard size 4611686018427387904 × alignment 4 "
            "elements does not fit in 64 bits (at most 9223372036854775807); plan for a smaller "
            "world size (--world-size) or alignment (--align)");
  EXPECT_NE(overflow_error([] { padded_numel(INT64_MAX, 2, 8); }).find("numel 9223372036854775807"),
            std::string::npos);
  EXPECT_EQ(padded_numel(INT64_MAX - 15, 2, 8), INT64_MAX - 15);  // already a multiple of 16
}

TEST(PlanRules, UnitTotalsThatOverflowNameTheUnit) {
  Plan plan = sample_plan();
  Unit& root = plan.units[0];
  root.groups[0].padded_numel = int64_t{1} << 62;  // × 2 bytes or more does not fit
  root.groups[0].shard_numel = int64_t{1} << 62;
  EXPECT_EQ(overflow_error([&] { unit_unsharded_bytes(plan.policy, root); }),
            "unit '<root>': unsharded_bytes (Σ groups padded_numel × compute dtype size) does not "
            "fit in 64 bits (at most 9223372036854775807); plan for a smaller world size "
            "(--world-size) or alignment (--align)");
  EXPECT_NE(overflow_error([&] { unit_sharded_bytes(root); }).find("unit '<root>': sharded_bytes"),
            std::string::npos);
  EXPECT_NE(overflow_error([&] {
              unit_reduce_scatter_bytes(plan.policy, root);
            }).find("unit '<root>': reduce-scatter bytes"),
            std::string::npos);
  EXPECT_NE(overflow_error([&] {
              unit_gradient_shard_bytes(plan.policy, root);
            }).find("unit '<root>': gradient shard bytes"),
            std::string::npos);
}

TEST(PlanRules, TotalsAreNoneWhenTheyDoNotFitIn64Bits) {
  Memory memory;
  memory.sharded_param_bytes = memory.sharded_grad_bytes = int64_t{1} << 62;
  EXPECT_EQ(per_rank_bytes(memory), std::nullopt);
  memory.sharded_grad_bytes = 1;
  memory.slot_bytes = 2;
  EXPECT_EQ(per_rank_bytes(memory), (int64_t{1} << 62) + 3);
  Communication communication;
  communication.all_gather_bytes = INT64_MAX;
  EXPECT_EQ(communication_bytes(communication), INT64_MAX);
  communication.all_reduce_bytes = 1;
  EXPECT_EQ(communication_bytes(communication), std::nullopt);
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
