// check_plan's schedule rules. The sample's schedule (see sample_plan.cpp):
//   0 pre_forward <root>         8 pre_backward <root>
//   1 pre_forward layers.0       9 pre_backward layers.1#1
//   2 post_forward layers.0     10 post_backward layers.1#1
//   3 pre_forward layers.1      11 pre_backward layers.1
//   4 post_forward layers.1     12 post_backward layers.1 (reduce-scatter)
//   5 pre_forward layers.1#1    13 pre_backward layers.0
//   6 post_forward layers.1#1   14 post_backward layers.0
//   7 post_forward <root>       15 post_backward <root> (reduce-scatter)
//                               16 end_of_backward
// Tests that add or drop collectives fix the communication totals, which recount them.

#include <gtest/gtest.h>

#include "sample_plan.h"
#include "schema/plan_check.h"

namespace mfsdp::schema {
namespace {

using Lines = std::vector<std::string>;

Lines check(const Plan& plan) {
  return problem_lines(check_plan(plan));
}

TEST(ScheduleCheck, RejectsUnknownPhase) {
  Plan plan = sample_plan();
  plan.schedule[0].phase = "fwd";
  EXPECT_EQ(check(plan), Lines{"schedule[0].phase: is 'fwd', expected 'forward' or 'backward'"});
}

TEST(ScheduleCheck, RejectsPointOfTheOtherPhase) {
  Plan plan = sample_plan();
  plan.schedule[7].phase = "backward";
  EXPECT_EQ(check(plan), Lines{"schedule[7].phase: is 'backward', but 'post_forward' belongs to "
                               "the forward phase"});
}

TEST(ScheduleCheck, RejectsUnknownPoint) {
  Plan plan = sample_plan();
  plan.schedule[2].point = "after_forward";
  EXPECT_EQ(check(plan),
            (Lines{"schedule[2].point: is 'after_forward', expected 'pre_forward', 'post_forward', "
                   "'pre_backward', 'post_backward' or 'end_of_backward'",
                   "schedule[2].reshard[0]: reshards 'layers.0' while it still runs (its "
                   "pre_forward at schedule[1] is not closed yet)",
                   "schedule[7]: closes '<root>' call 0 while 'layers.0' call 0 (opened at "
                   "schedule[1]) is still open; pre and post entries nest like brackets"}));
}

TEST(ScheduleCheck, ForwardEntriesPrecedeBackwardOnes) {
  Plan plan = sample_plan();
  std::swap(plan.schedule[7], plan.schedule[8]);
  EXPECT_EQ(check(plan),
            (Lines{"schedule[0]: opens '<root>' call 0, which no post_forward closes",
                   "schedule[8]: is a forward entry after the backward phase began at schedule[7]",
                   "schedule[15]: closes '<root>' call 0, which has no open pre_backward"}));
}

TEST(ScheduleCheck, EndOfBackwardIsTheLastEntry) {
  Plan plan = sample_plan();
  plan.schedule.push_back(plan.schedule.back());
  EXPECT_EQ(check(plan), Lines{"schedule[17]: comes after end_of_backward at schedule[16], which "
                               "must be the last entry"});
}

TEST(ScheduleCheck, RequiresEndOfBackward) {
  Plan plan = sample_plan();
  plan.schedule.pop_back();
  EXPECT_EQ(check(plan), Lines{"schedule: does not end with the end_of_backward entry"});
}

TEST(ScheduleCheck, EndOfBackwardHasNoUnitAndNoCall) {
  Plan plan = sample_plan();
  plan.schedule[16].unit = kRootName;
  plan.schedule[16].call = 1;
  EXPECT_EQ(check(plan),
            (Lines{"schedule[16].unit: is '<root>', but end_of_backward names no unit",
                   "schedule[16].call: is 1, but end_of_backward has no call; expected 0"}));
}

TEST(ScheduleCheck, EveryOtherEntryNamesAUnit) {
  Plan plan = sample_plan();
  plan.schedule[4].unit.reset();
  EXPECT_EQ(check(plan),
            (Lines{"schedule[4].unit: is null; only end_of_backward names no unit",
                   "schedule[6].reshard[0]: reshards 'layers.1' while it still runs (its "
                   "pre_forward at schedule[3] is not closed yet)",
                   "schedule[7]: closes '<root>' call 0 while 'layers.1' call 0 (opened at "
                   "schedule[3]) is still open; pre and post entries nest like brackets"}));
  plan.schedule[4].unit = "layers.9";
  EXPECT_EQ(check(plan),
            (Lines{"schedule[4].unit: 'layers.9' is not a unit",
                   "schedule[6].reshard[0]: reshards 'layers.1' while it still runs (its "
                   "pre_forward at schedule[3] is not closed yet)",
                   "schedule[7]: closes '<root>' call 0 while 'layers.1' call 0 (opened at "
                   "schedule[3]) is still open; pre and post entries nest like brackets"}));
}

TEST(ScheduleCheck, PreAndPostEntriesNestLikeBrackets) {
  Plan plan = sample_plan();
  std::swap(plan.schedule[6], plan.schedule[7]);
  plan.schedule[6].unsharded_bytes = 224;  // layers.1 is still gathered at schedule[6] now
  EXPECT_EQ(check(plan),
            (Lines{"schedule[6]: closes '<root>' call 0 while 'layers.1' call 1 (opened at "
                   "schedule[5]) is still open; pre and post entries nest like brackets",
                   "schedule[7]: closes 'layers.1' call 1, which has no open pre_forward"}));
}

TEST(ScheduleCheck, RejectsPreEntryThatIsNeverClosed) {
  Plan plan = sample_plan();
  plan.schedule.erase(plan.schedule.begin() + 7);
  EXPECT_EQ(check(plan), Lines{"schedule[0]: opens '<root>' call 0, which no post_forward closes"});
}

TEST(ScheduleCheck, ForwardRunsCallsInOrder) {
  Plan plan = sample_plan();
  for (int e : {3, 4}) plan.schedule[e].call = 1;
  for (int e : {5, 6}) plan.schedule[e].call = 0;
  plan.memory.peak_at = "pre_forward layers.1#1";
  EXPECT_EQ(check(plan), (Lines{"schedule[3].call: is 1, expected 0: forward runs the calls of "
                                "'layers.1' in order from 0",
                                "schedule[5].call: is 0, expected 1: forward runs the calls of "
                                "'layers.1' in order from 0"}));
}

TEST(ScheduleCheck, BackwardVisitsCallsInReverse) {
  Plan plan = sample_plan();
  for (int e : {9, 10}) plan.schedule[e].call = 0;
  for (int e : {11, 12}) plan.schedule[e].call = 1;
  EXPECT_EQ(check(plan),
            (Lines{"schedule[9].call: is 0, expected 1: backward visits the calls of 'layers.1' "
                   "in reverse, ending with 0",
                   "schedule[11].call: is 1, expected 0: backward visits the calls of 'layers.1' "
                   "in reverse, ending with 0",
                   "schedule[12].reduce_scatter[0]: reduce-scatters 'layers.1' at call 1; its "
                   "gradient is complete only after call 0, the last backward visit"}));
}

TEST(ScheduleCheck, RejectsMorePreEntriesThanCalls) {
  Plan plan = sample_plan();
  plan.units[2].call_count = 1;
  EXPECT_EQ(check(plan),
            (Lines{"schedule[5]: is pre_forward number 2 of 'layers.1', whose call_count is 1",
                   "schedule[9].call: is 1, expected 0: backward visits the calls of 'layers.1' in "
                   "reverse, ending with 0",
                   "schedule[11]: is pre_backward number 2 of 'layers.1', whose call_count is 1"}));
}

TEST(ScheduleCheck, RejectsFewerPreEntriesThanCalls) {
  Plan plan = sample_plan();
  plan.units[2].call_count = 3;
  EXPECT_EQ(check(plan),
            (Lines{"schedule[9].call: is 1, expected 2: backward visits the calls of 'layers.1' in "
                   "reverse, ending with 0",
                   "schedule[11].call: is 0, expected 1: backward visits the calls of 'layers.1' "
                   "in reverse, ending with 0",
                   "schedule: has 2 pre_forward entries for 'layers.1', expected its call_count 3",
                   "schedule: has 2 pre_backward entries for 'layers.1', expected its call_count "
                   "3"}));
}

TEST(ScheduleCheck, RejectsWaitWithoutAllGather) {
  Plan plan = sample_plan();
  plan.schedule[1].all_gather.clear();
  plan.communication.all_gather_count = 4;
  plan.communication.all_gather_bytes = 416;
  EXPECT_EQ(check(plan), Lines{"schedule[1].wait[0]: waits on an all-gather of 'layers.0' it never "
                               "issued"});
}

TEST(ScheduleCheck, RejectsAllGatherIssuedTwice) {
  Plan plan = sample_plan();
  plan.schedule[1].all_gather.push_back("layers.0");
  plan.communication.all_gather_count = 6;
  plan.communication.all_gather_bytes = 544;
  EXPECT_EQ(check(plan), Lines{"schedule[1].all_gather[1]: all-gathers 'layers.0', which is "
                               "already being gathered: all-gather issued twice"});
}

TEST(ScheduleCheck, RejectsWaitingTwice) {
  Plan plan = sample_plan();
  plan.schedule[5].wait.push_back("layers.1");
  EXPECT_EQ(check(plan), Lines{"schedule[5].wait[0]: waits on 'layers.1' again; its all-gather "
                               "already finished"});
}

TEST(ScheduleCheck, RejectsReshardOfAUnitThatIsNotGathered) {
  Plan plan = sample_plan();
  plan.schedule[2].reshard.push_back("layers.0");
  EXPECT_EQ(check(plan),
            Lines{"schedule[2].reshard[1]: reshards 'layers.0', which is not gathered"});
}

TEST(ScheduleCheck, RejectsReshardBeforeWait) {
  Plan plan = sample_plan();
  plan.schedule[16].all_gather = {"layers.1"};
  plan.schedule[16].reshard = {"layers.1"};
  plan.schedule[16].unsharded_bytes = 128;
  plan.communication.all_gather_count = 6;
  plan.communication.all_gather_bytes = 608;
  EXPECT_EQ(check(plan), Lines{"schedule[16].reshard[0]: reshards 'layers.1' before waiting for "
                               "its all-gather"});
}

TEST(ScheduleCheck, RejectsReshardOfAUnitThatStillRuns) {
  Plan plan = sample_plan();
  plan.schedule[6].reshard.clear();
  plan.schedule[5].reshard = {"layers.1"};
  plan.schedule[6].unsharded_bytes = 96;
  EXPECT_EQ(check(plan), Lines{"schedule[5].reshard[0]: reshards 'layers.1' while it still runs "
                               "(its pre_forward at schedule[5] is not closed yet)"});
}

TEST(ScheduleCheck, UnitIsGatheredWhenItRuns) {
  Plan plan = sample_plan();
  plan.schedule[13].wait.clear();
  plan.schedule[14].wait = {"layers.0"};
  EXPECT_EQ(check(plan), Lines{"schedule[13]: runs 'layers.0' before it is gathered; all-gather "
                               "and wait for it by here"});
}

TEST(ScheduleCheck, UnitWithoutParametersNeedsNoCollectives) {
  Plan plan = sample_plan();
  Unit head;
  head.name = "head";
  head.parent = kRootName;
  head.call_count = 1;
  plan.units.push_back(head);
  plan.forward_order.push_back("head");
  plan.backward_order.insert(plan.backward_order.begin() + 1, "head");
  const auto visit = [](const char* phase, const char* point) {
    return ScheduleEntry{phase, point, "head", 0, {}, {}, {}, {}, 96};
  };
  // Runs after layers.1's last forward call and first in backward, inside <root>.
  plan.schedule.insert(plan.schedule.begin() + 9,
                       {visit("backward", "pre_backward"), visit("backward", "post_backward")});
  plan.schedule.insert(plan.schedule.begin() + 7,
                       {visit("forward", "pre_forward"), visit("forward", "post_forward")});
  EXPECT_EQ(check(plan), Lines{});
}

TEST(ScheduleCheck, EveryUnitIsShardedAtTheEnd) {
  Plan plan = sample_plan();
  plan.schedule[15].reshard.clear();
  plan.schedule[16].unsharded_bytes = 96;
  EXPECT_EQ(check(plan), Lines{"schedule: '<root>' is still gathered at the end of backward; "
                               "reshard it by end_of_backward"});
}

TEST(ScheduleCheck, ReshardAtEndOfBackwardIsAllowed) {
  Plan plan = sample_plan();
  plan.schedule[15].reshard.clear();
  plan.schedule[16].reshard = {kRootName};
  plan.schedule[16].unsharded_bytes = 96;
  EXPECT_EQ(check(plan), Lines{});
}

TEST(ScheduleCheck, CountsBytesOfUnitsStillGathering) {
  Plan plan = sample_plan();
  // Prefetch layers.0 at <root>'s pre_forward: it is live from then on.
  plan.schedule[1].all_gather.clear();
  plan.schedule[0].all_gather.push_back("layers.0");
  EXPECT_EQ(check(plan), Lines{"schedule[0].unsharded_bytes: is 96, expected 160 (the units "
                               "gathering or gathered after this entry's all-gathers, before its "
                               "reshards)"});
  plan.schedule[0].unsharded_bytes = 160;
  EXPECT_EQ(check(plan), Lines{});
}

TEST(ScheduleCheck, CountsBytesBeforeTheReshards) {
  Plan plan = sample_plan();
  plan.schedule[2].unsharded_bytes = 96;  // what is left after the reshard: too late
  EXPECT_EQ(check(plan), Lines{"schedule[2].unsharded_bytes: is 96, expected 160 (the units "
                               "gathering or gathered after this entry's all-gathers, before its "
                               "reshards)"});
}

TEST(ScheduleCheck, RejectsActionOnUnknownUnit) {
  Plan plan = sample_plan();
  plan.schedule[16].all_gather = {"layers.9"};
  plan.communication.all_gather_count = 6;
  EXPECT_EQ(check(plan), Lines{"schedule[16].all_gather[0]: 'layers.9' is not a unit"});
}

TEST(ScheduleCheck, ReduceScattersEveryUnitWithGradient) {
  Plan plan = sample_plan();
  plan.schedule[15].reduce_scatter.clear();
  plan.communication.reduce_scatter_count = 1;
  plan.communication.reduce_scatter_bytes = 256;
  plan.communication.all_reduce_bytes = 128;
  EXPECT_EQ(check(plan),
            Lines{"schedule: never reduce-scatters '<root>', whose gradient needs it"});
}

TEST(ScheduleCheck, ReduceScatterBelongsToTheUnitsOwnPostBackward) {
  Plan plan = sample_plan();
  plan.schedule[15].reduce_scatter.clear();
  plan.schedule[14].reduce_scatter = {kRootName};
  EXPECT_EQ(check(plan), Lines{"schedule[14].reduce_scatter[0]: reduce-scatters '<root>' outside "
                               "its own post_backward, where its gradient is ready"});
}

TEST(ScheduleCheck, ReduceScatterWaitsForCallZero) {
  Plan plan = sample_plan();
  plan.schedule[12].reduce_scatter.clear();
  plan.schedule[10].reduce_scatter = {"layers.1"};
  EXPECT_EQ(check(plan), Lines{"schedule[10].reduce_scatter[0]: reduce-scatters 'layers.1' at call "
                               "1; its gradient is complete only after call 0, the last backward "
                               "visit"});
}

TEST(ScheduleCheck, RejectsReduceScatterIssuedTwice) {
  Plan plan = sample_plan();
  plan.schedule[12].reduce_scatter.push_back("layers.1");
  plan.communication.reduce_scatter_count = 3;
  plan.communication.reduce_scatter_bytes = 640;
  plan.communication.all_reduce_bytes = 320;
  EXPECT_EQ(check(plan), Lines{"schedule[12].reduce_scatter[1]: reduce-scatters 'layers.1' twice "
                               "(also at schedule[12])"});
}

TEST(ScheduleCheck, ReduceScatterNeedsTheGatheredUnit) {
  Plan plan = sample_plan();
  plan.schedule[12].reshard.clear();
  plan.schedule[11].reshard = {"layers.1"};
  plan.schedule[12].unsharded_bytes = 96;
  EXPECT_EQ(check(plan),
            (Lines{"schedule[11].reshard[0]: reshards 'layers.1' while it still runs (its "
                   "pre_backward at schedule[11] is not closed yet)",
                   "schedule[12].reduce_scatter[0]: reduce-scatters 'layers.1', which is not "
                   "gathered at this point"}));
}

TEST(ScheduleCheck, RejectsReduceScatterOfAFrozenUnit) {
  Plan plan = sample_plan();
  plan.schedule[14].reduce_scatter = {"layers.0"};
  plan.communication.reduce_scatter_count = 3;
  EXPECT_EQ(check(plan), Lines{"schedule[14].reduce_scatter[0]: 'layers.0' has no gradient to "
                               "reduce-scatter (no floating group requires grad)"});
}

}  // namespace
}  // namespace mfsdp::schema
