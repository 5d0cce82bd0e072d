// check_plan's layout rules: parameter shapes and offsets, group padding and shards, unit and
// model totals. Changing a group's sizes also changes its unit's byte totals; where a test
// does that, the unit problems are part of the exact expectation.

#include <algorithm>
#include <cstdint>

#include <gtest/gtest.h>

#include "sample_plan.h"
#include "schema/plan_check.h"

namespace mfsdp::schema {
namespace {

using Lines = std::vector<std::string>;

Lines check(const Plan& plan) {
  return problem_lines(check_plan(plan));
}

Group& root_floats(Plan& plan) {
  return plan.units[0].groups[0];
}
Group& layer0_floats(Plan& plan) {
  return plan.units[1].groups[0];
}

TEST(LayoutCheck, RejectsUnknownGroupDtype) {
  Plan plan = sample_plan();
  plan.units[0].groups[1].dtype = "int128";
  EXPECT_EQ(check(plan), Lines{"units[0].groups[1].dtype: unknown dtype 'int128'"});
}

TEST(LayoutCheck, NumelIsTheProductOfTheShape) {
  Plan plan = sample_plan();
  root_floats(plan).params[1].shape = {4};
  EXPECT_EQ(check(plan),
            Lines{"units[0].groups[0].params[1].numel: is 3, but shape [4] has 4 elements"});
}

TEST(LayoutCheck, ScalarHasOneElement) {
  Plan plan = sample_plan();
  plan.units[0].groups[1].params[0].numel = 0;
  plan.units[0].groups[1].numel = 0;
  EXPECT_EQ(check(plan),
            (Lines{"units[0].groups[1].params[0].numel: is 0, but shape [] has 1 "
                   "elements",
                   "units[0].groups[1].padded_numel: 4 pads numel 0 by 4 elements; a "
                   "multiple of shard size 2 × alignment 2 elements needs fewer than 4",
                   "model.parameter_numel: is 86, but the units' parameters hold 85 "
                   "elements"}));
}

TEST(LayoutCheck, RejectsNegativeDimension) {
  Plan plan = sample_plan();
  root_floats(plan).params[1].shape = {-3};
  EXPECT_EQ(check(plan), Lines{"units[0].groups[0].params[1].shape[0]: negative dimension -3"});
}

TEST(LayoutCheck, RejectsShapeBeyond64Bits) {
  Plan plan = sample_plan();
  root_floats(plan).params[1].shape = {int64_t{1} << 62, 4, 1};
  EXPECT_EQ(check(plan), Lines{"units[0].groups[0].params[1].numel: shape [4611686018427387904, 4, "
                               "1] has 2^63 or more elements"});
  // A zero dimension empties the tensor however large the others are.
  root_floats(plan).params[1].shape = {int64_t{1} << 62, 4, 0};
  EXPECT_EQ(check(plan), Lines{"units[0].groups[0].params[1].numel: is 3, but shape "
                               "[4611686018427387904, 4, 0] has 0 elements"});
}

TEST(LayoutCheck, OffsetsAlignToTheGroupAlignment) {
  Plan plan = sample_plan();
  // 41 elements still fit in padded_numel 64 with less than 16 elements of padding.
  plan.units[2].groups[0].params[1].offset = 41;
  plan.units[2].groups[0].numel = 51;
  EXPECT_EQ(check(plan), Lines{"units[2].groups[0].params[1].offset: 41 is not a multiple of the "
                               "alignment, 8 elements"});
}

TEST(LayoutCheck, IntegerGroupsAlignInTheirOwnDtype) {
  Plan plan = sample_plan();
  // int64 is not cast to param_dtype: 16 bytes / 8 = 2 elements, not 8.
  Group& steps = plan.units[0].groups[1];
  steps.params.push_back({"step2", {}, 1, 2, {}});
  steps.numel = 3;
  plan.model.parameters = 8;
  plan.model.parameter_numel = 87;
  EXPECT_EQ(check(plan), Lines{});
}

TEST(LayoutCheck, ParamsAreSortedByOffset) {
  Plan plan = sample_plan();
  std::swap(root_floats(plan).params[0], root_floats(plan).params[1]);
  EXPECT_EQ(check(plan),
            (Lines{"units[0].groups[0].params[1].offset: 0 comes before the offset 16 "
                   "of the previous parameter 'head.bias'; params are sorted by offset",
                   "units[0].groups[0].numel: is 19, but the last parameter ends at 12"}));
}

TEST(LayoutCheck, ParamsDoNotOverlap) {
  Plan plan = sample_plan();
  root_floats(plan).params[1].offset = 8;
  EXPECT_EQ(check(plan),
            (Lines{"units[0].groups[0].params[1].offset: 8 overlaps 'head.weight', "
                   "which ends at 12",
                   "units[0].groups[0].numel: is 19, but the last parameter ends at 11"}));
}

TEST(LayoutCheck, GroupNumelEndsAtTheLastParameter) {
  Plan plan = sample_plan();
  root_floats(plan).numel = 20;
  EXPECT_EQ(check(plan),
            Lines{"units[0].groups[0].numel: is 20, but the last parameter ends at 19"});
}

TEST(LayoutCheck, RejectsGroupWithoutParameters) {
  Plan plan = sample_plan();
  plan.units[1].groups.push_back({"float32", false, 0, 0, 0, {}});
  EXPECT_EQ(check(plan), Lines{"units[1].groups[1].params: is empty; a group holds parameters"});
}

TEST(LayoutCheck, RejectsPaddedNumelSmallerThanNumel) {
  Plan plan = sample_plan();
  layer0_floats(plan).padded_numel = 16;
  layer0_floats(plan).shard_numel = 8;
  EXPECT_EQ(check(plan),
            (Lines{"units[1].groups[0].padded_numel: 16 is smaller than numel 20",
                   "units[1].sharded_bytes: is 64, expected 32 (Σ groups shard_numel × dtype size)",
                   "units[1].unsharded_bytes: is 64, expected 32 (Σ groups padded_numel × compute "
                   "dtype size)"}));
}

TEST(LayoutCheck, RejectsPaddedNumelThatDoesNotSplitAligned) {
  Plan plan = sample_plan();
  layer0_floats(plan).padded_numel = 40;
  layer0_floats(plan).shard_numel = 20;
  EXPECT_EQ(check(plan),
            (Lines{"units[1].groups[0].padded_numel: 40 is not divisible by shard size 2 × "
                   "alignment 8 elements",
                   "units[1].sharded_bytes: is 64, expected 80 (Σ groups shard_numel × dtype size)",
                   "units[1].unsharded_bytes: is 64, expected 80 (Σ groups padded_numel × compute "
                   "dtype size)"}));
}

TEST(LayoutCheck, RejectsExcessPadding) {
  Plan plan = sample_plan();
  layer0_floats(plan).padded_numel = 48;
  layer0_floats(plan).shard_numel = 24;
  EXPECT_EQ(check(plan),
            (Lines{"units[1].groups[0].padded_numel: 48 pads numel 20 by 28 elements; a multiple "
                   "of shard size 2 × alignment 8 elements needs fewer than 16",
                   "units[1].sharded_bytes: is 64, expected 96 (Σ groups shard_numel × dtype size)",
                   "units[1].unsharded_bytes: is 64, expected 96 (Σ groups padded_numel × compute "
                   "dtype size)"}));
}

TEST(LayoutCheck, ShardsSplitThePaddedBufferEvenly) {
  Plan plan = sample_plan();
  layer0_floats(plan).shard_numel = 15;
  EXPECT_EQ(check(plan),
            (Lines{"units[1].groups[0].shard_numel: 15 × shard size 2 is not padded_numel 32",
                   "units[1].sharded_bytes: is 64, expected 60 (Σ groups shard_numel × dtype "
                   "size)"}));
}

TEST(LayoutCheck, UnshardedBytesUseTheComputeDtype) {
  Plan plan = sample_plan();
  plan.policy.param_dtype = "float64";  // float32 groups now gather as float64: 32 × 8 + 4 × 8
  const Lines lines = check(plan);
  EXPECT_NE(std::find(lines.begin(), lines.end(),
                      "units[0].unsharded_bytes: is 96, expected 288 (Σ groups padded_numel × "
                      "compute dtype size)"),
            lines.end());
}

TEST(LayoutCheck, ShardedBytesAddUpTheGroups) {
  Plan plan = sample_plan();
  plan.units[0].sharded_bytes = 81;
  plan.memory.sharded_param_bytes = 273;
  EXPECT_EQ(check(plan), Lines{"units[0].sharded_bytes: is 81, expected 80 (Σ groups shard_numel "
                               "× dtype size)"});
}

TEST(LayoutCheck, RejectsParameterNameUsedTwice) {
  Plan plan = sample_plan();
  plan.units[2].groups[0].params[1].name = "layers.1.weight";
  EXPECT_EQ(check(plan), Lines{"units[2].groups[0].params[1].name: parameter 'layers.1.weight' is "
                               "also units[2].groups[0].params[0].name"});
}

TEST(LayoutCheck, RejectsAliasThatNamesAnotherParameter) {
  Plan plan = sample_plan();
  root_floats(plan).params[0].aliases = {"layers.0.weight"};
  EXPECT_EQ(check(plan), Lines{"units[1].groups[0].params[0].name: parameter 'layers.0.weight' is "
                               "also units[0].groups[0].params[0].aliases[0]"});
}

TEST(LayoutCheck, RejectsEmptyParameterName) {
  Plan plan = sample_plan();
  root_floats(plan).params[0].name = "";
  EXPECT_EQ(check(plan), Lines{"units[0].groups[0].params[0].name: is empty"});
}

TEST(LayoutCheck, ModelCountsEveryParameterOnce) {
  Plan plan = sample_plan();
  plan.model.parameters = 8;
  plan.model.parameter_numel = 85;
  EXPECT_EQ(check(plan), (Lines{"model.parameters: is 8, but the units hold 7",
                                "model.parameter_numel: is 85, but the units' parameters hold 86 "
                                "elements"}));
}

TEST(LayoutCheck, RejectsNegativeBufferDimension) {
  Plan plan = sample_plan();
  plan.units[1].buffers[0].shape = {-1};
  EXPECT_EQ(check(plan), Lines{"units[1].buffers[0].shape[0]: negative dimension -1"});
}

}  // namespace
}  // namespace mfsdp::schema
