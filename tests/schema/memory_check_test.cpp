// check_plan's memory rules: the peak, the budget, sharded totals and slots.

#include <gtest/gtest.h>

#include "sample_plan.h"
#include "schema/plan_check.h"

namespace mfsdp::schema {
namespace {

using Lines = std::vector<std::string>;

Lines check(const Plan& plan) {
  return problem_lines(check_plan(plan));
}

TEST(MemoryCheck, PeakIsTheLargestEntry) {
  Plan plan = sample_plan();
  plan.memory.peak_unsharded_bytes = 288;
  EXPECT_EQ(check(plan), Lines{"memory.peak_unsharded_bytes: is 288, expected 224 (the largest "
                               "schedule[].unsharded_bytes)"});
}

TEST(MemoryCheck, PeakAtNamesTheFirstEntryAtThePeak) {
  Plan plan = sample_plan();
  plan.memory.peak_at = "pre_forward layers.1#1";  // also 224, but later
  EXPECT_EQ(check(plan), Lines{"memory.peak_at: is 'pre_forward layers.1#1', expected "
                               "'pre_forward layers.1' (the first entry at the peak)"});
}

TEST(MemoryCheck, RejectsPeakOverTheBudget) {
  Plan plan = sample_plan();
  plan.policy.resident_budget_bytes = 223;
  EXPECT_EQ(check(plan),
            Lines{"memory.peak_unsharded_bytes: 224 exceeds policy.resident_budget_bytes 223"});
  plan.policy.resident_budget_bytes = 224;
  EXPECT_EQ(check(plan), Lines{});
}

TEST(MemoryCheck, ShardedParamBytesAddUpTheUnits) {
  Plan plan = sample_plan();
  plan.memory.sharded_param_bytes = 271;
  EXPECT_EQ(check(plan), Lines{"memory.sharded_param_bytes: is 271, expected 272 (Σ units' "
                               "sharded_bytes)"});
}

// Main gradients are float32 under a bf16 or fp16 reduce dtype (accumulated in full
// precision), and in the reduce dtype when it is wider.
TEST(MemoryCheck, ShardedGradBytesUseTheMainGradientDtype) {
  Plan plan = sample_plan();
  plan.policy.reduce_dtype = "bfloat16";  // reduced in bf16, kept in float32: 192 stands
  for (const std::string& line : check(plan)) {
    EXPECT_NE(line.rfind("memory.sharded_grad_bytes", 0), 0u) << line;
  }
  plan.policy.reduce_dtype = "float64";  // gradient shards double: 16 × 8 + 32 × 8
  EXPECT_EQ(check(plan)[0],
            "memory.sharded_grad_bytes: is 192, expected 384 (Σ gradient groups' "
            "shard_numel × main gradient dtype size)");
}

TEST(MemoryCheck, SlotsAreNumberedInOrder) {
  Plan plan = sample_plan();
  plan.memory.slots[1].index = 2;
  EXPECT_EQ(check(plan), Lines{"memory.slots[1].index: is 2, expected 1"});
}

TEST(MemoryCheck, SlotHoldsItsLargestUnit) {
  Plan plan = sample_plan();
  plan.memory.slots[1].bytes = 100;
  plan.memory.slot_bytes = 196;
  EXPECT_EQ(check(plan),
            Lines{"memory.slots[1].bytes: is 100, smaller than the 128 unsharded bytes "
                  "of 'layers.1'"});
}

TEST(MemoryCheck, SlotBytesAddUpTheSlots) {
  Plan plan = sample_plan();
  plan.memory.slot_bytes = 192;
  EXPECT_EQ(check(plan), Lines{"memory.slot_bytes: is 192, expected 224 (Σ slots' bytes)"});
}

TEST(MemoryCheck, EveryGatheredUnitHasASlot) {
  Plan plan = sample_plan();
  plan.memory.slots[1].units = {"layers.0"};
  EXPECT_EQ(check(plan), Lines{"memory.slots: 'layers.1' is all-gathered but has no slot"});
}

TEST(MemoryCheck, UnitHasOnlyOneSlot) {
  Plan plan = sample_plan();
  plan.memory.slots.push_back({2, 128, {"layers.1"}});
  plan.memory.slot_bytes = 352;
  EXPECT_EQ(check(plan), Lines{"memory.slots[2].units[0]: 'layers.1' is already in "
                               "memory.slots[1].units[1]"});
}

TEST(MemoryCheck, RejectsUnknownUnitInSlot) {
  Plan plan = sample_plan();
  plan.memory.slots[0].units.push_back("layers.9");
  EXPECT_EQ(check(plan), Lines{"memory.slots[0].units[1]: 'layers.9' is not a unit"});
}

TEST(MemoryCheck, UnitsSharingASlotAreNeverLiveTogether) {
  Plan plan = sample_plan();
  plan.memory.slots = {{0, 96, {kRootName, "layers.0"}}, {1, 128, {"layers.1"}}};
  EXPECT_EQ(check(plan),
            Lines{"memory.slots[0].units[1]: 'layers.0' is live during "
                  "schedule[1..2], as is '<root>' (schedule[0..15]) in the same slot"});
}

TEST(MemoryCheck, LifetimesIncludeBothEndEntries) {
  Plan plan = sample_plan();
  // Prefetch layers.1 in the entry that reshards layers.0: both buffers exist in that entry.
  plan.schedule[3].all_gather.clear();
  plan.schedule[2].all_gather = {"layers.1"};
  plan.schedule[2].unsharded_bytes = 288;
  plan.memory.peak_unsharded_bytes = 288;
  plan.memory.peak_at = "post_forward layers.0";
  EXPECT_EQ(check(plan), Lines{"memory.slots[1].units[1]: 'layers.1' is live during "
                               "schedule[2..6], as is 'layers.0' (schedule[1..2]) in the same "
                               "slot"});
}

}  // namespace
}  // namespace mfsdp::schema
