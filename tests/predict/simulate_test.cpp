#include "predict/simulate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "schema/error.h"
#include "schema/plan_json.h"
#include "tests/planner/test_support.h"  // EXPECT_MFSDP_ERROR

namespace mfsdp::predict {
namespace {

using schema::ParseResult;
using schema::Plan;
using schema::read_plan_file;
using schema::Unit;

Plan golden_plan(const std::string& name) {
  ParseResult r = read_plan_file(std::string(MFSDP_SOURCE_DIR) + "/plans/" + name + ".plan.json");
  EXPECT_TRUE(r.problems.empty()) << name;
  return r.plan;
}

// Round numbers for tied_lm (plans/tied_lm.plan.json: <root> holds the embedding and the head,
// layers.0 and layers.1 the blocks; prefetch 1 both ways): every all-gather 10 us, every
// reduce-scatter 15 us, forward 5 us for the root's own work and 30 per block, backward 5
// and 60.
StepCosts round_costs() {
  StepCosts c;
  c.all_gather.latency_us = 10;
  c.reduce_scatter.latency_us = 15;
  c.all_reduce.latency_us = 7;
  c.forward_us = {{"<root>", 5}, {"layers.0", 30}, {"layers.1", 30}};
  c.backward_us = {{"<root>", 5}, {"layers.0", 60}, {"layers.1", 60}};
  return c;
}

struct Span {
  std::string track, name;
  double start, end;
};

std::vector<Span> on_track(const Prediction& p, const std::string& track) {
  std::vector<Span> out;
  for (const PredictedSpan& s : p.timeline) {
    if (s.track == track) out.push_back({s.track, s.name, s.start_us, s.end_us});
  }
  return out;
}

void expect_spans(const std::vector<Span>& got, const std::vector<Span>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name) << i;
    EXPECT_DOUBLE_EQ(got[i].start, want[i].start) << got[i].name;
    EXPECT_DOUBLE_EQ(got[i].end, want[i].end) << got[i].name;
  }
}

// The timeline worked out by hand from tied_lm's schedule, one microbatch:
//   pre_forward <root>: gathers <root> 0-10 and layers.0 10-20; compute waits 0-10; root 10-15
//   pre_forward layers.0: gathers layers.1 20-30; waits 15-20; forward 20-50
//   pre_forward layers.1: its gather landed at 30; forward 50-80
//   pre_backward <root>: gathers layers.1 80-90; backward 80-85
//   pre_backward layers.1: gathers layers.0 90-100; waits 85-90; backward 90-150
//   post_backward layers.1: reduce-scatter 150-165
//   pre_backward layers.0: its gather landed at 100; backward 150-210
//   post_backward layers.0, <root>: reduce-scatters 210-225, 225-240
//   end of backward (the last microbatch): compute waits 210-240.
// Step 240 us: 190 of compute, 50 waiting (10 + 5 + 5 + 30).
TEST(Simulate, OneMicrobatchFollowsTheScheduleAsWorkedOutByHand) {
  const Prediction p = simulate_step(golden_plan("tied_lm"), round_costs(), 1);
  EXPECT_DOUBLE_EQ(p.step_us, 240);
  EXPECT_DOUBLE_EQ(p.compute_us, 190);
  EXPECT_DOUBLE_EQ(p.exposed_comm_us, 50);
  expect_spans(on_track(p, "all_gather"), {{"", "all-gather of <root>", 0, 10},
                                           {"", "all-gather of layers.0", 10, 20},
                                           {"", "all-gather of layers.1", 20, 30},
                                           {"", "all-gather of layers.1", 80, 90},
                                           {"", "all-gather of layers.0", 90, 100}});
  expect_spans(on_track(p, "reduce_scatter"), {{"", "reduce-scatter of layers.1", 150, 165},
                                               {"", "reduce-scatter of layers.0", 210, 225},
                                               {"", "reduce-scatter of <root>", 225, 240}});
  expect_spans(on_track(p, "compute"), {{"", "wait for all-gather of <root>", 0, 10},
                                        {"", "forward <root>", 10, 15},
                                        {"", "wait for all-gather of layers.0", 15, 20},
                                        {"", "forward layers.0", 20, 50},
                                        {"", "forward layers.1", 50, 80},
                                        {"", "backward <root>", 80, 85},
                                        {"", "wait for all-gather of layers.1", 85, 90},
                                        {"", "backward layers.1", 90, 150},
                                        {"", "backward layers.0", 150, 210},
                                        {"", "wait for reduce-scatters", 210, 240}});
}

// The root's code after the last block (the head) runs after post_forward layers.1, 80-88, so
// everything after it moves by 8: step 248. A unit's forward window runs from the end of
// its wait to its post_forward, nested units included (<root> 10-88), its backward window
// from its pre_backward's end of wait to its gradients being complete (<root>: 88-218).
TEST(Simulate, PostForwardTimeRunsAfterTheUnitAndWindowsSpanNestedUnits) {
  StepCosts costs = round_costs();
  costs.post_forward_us = {{"layers.1", 8}};
  const Prediction p = simulate_step(golden_plan("tied_lm"), costs, 1);
  EXPECT_DOUBLE_EQ(p.step_us, 248);
  EXPECT_DOUBLE_EQ(p.compute_us, 198);
  const auto compute = on_track(p, "compute");
  ASSERT_GE(compute.size(), 4u);
  EXPECT_EQ(compute[3].name, "forward layers.0");
  EXPECT_EQ(compute[5].name, "after layers.1");
  EXPECT_DOUBLE_EQ(compute[5].start, 80);
  EXPECT_DOUBLE_EQ(compute[5].end, 88);
  const auto window = [&](const std::string& unit, const std::string& phase) {
    for (const UnitWindow& w : p.windows) {
      if (w.unit == unit && w.phase == phase)
        return std::pair<double, double>{w.start_us, w.end_us};
    }
    ADD_FAILURE() << "no " << phase << " window of " << unit;
    return std::pair<double, double>{};
  };
  EXPECT_EQ(window("<root>", "forward"), (std::pair<double, double>{10, 88}));
  EXPECT_EQ(window("layers.0", "forward"), (std::pair<double, double>{20, 50}));
  EXPECT_EQ(window("layers.1", "forward"), (std::pair<double, double>{50, 80}));
  EXPECT_EQ(window("layers.1", "backward"), (std::pair<double, double>{98, 158}));
  EXPECT_EQ(window("layers.0", "backward"), (std::pair<double, double>{158, 218}));
  EXPECT_EQ(window("<root>", "backward"), (std::pair<double, double>{88, 218}));
  EXPECT_EQ(p.windows.size(), 6u);
}

// Contention 1: compute runs at half speed while a collective runs. By hand, one microbatch:
//   root forward (5 of work) 10-20 beside the all-gather of layers.0 (10-20): half speed
//   layers.0 (30) 20-55: 20-30 beside the all-gather of layers.1, 5 done, then 25 alone
//   layers.1 (30) 55-85 alone; root backward (5) 85-95 beside the all-gather of layers.1
//   layers.1 backward (60) 95-160: 95-105 beside the all-gather of layers.0, then 55 alone
//   reduce-scatter of layers.1 160-175; layers.0 backward (60) 160-227.5: 7.5 done by 175
//   reduce-scatters of layers.0 and <root> 227.5-257.5; compute waits for them.
// Step 257.5 = 190 of compute + 40 waiting (10 at the start, 30 at the end) + 27.5 slower.
TEST(Simulate, ContentionSlowsComputeWhileCollectivesRunBesideIt) {
  StepCosts costs = round_costs();
  costs.contention = 1;
  const Prediction p = simulate_step(golden_plan("tied_lm"), costs, 1);
  EXPECT_DOUBLE_EQ(p.step_us, 257.5);
  EXPECT_DOUBLE_EQ(p.compute_us, 190);
  EXPECT_DOUBLE_EQ(p.exposed_comm_us, 40);
  EXPECT_DOUBLE_EQ(p.contention_us, 27.5);
  expect_spans(on_track(p, "compute"), {{"", "wait for all-gather of <root>", 0, 10},
                                        {"", "forward <root>", 10, 20},
                                        {"", "forward layers.0", 20, 55},
                                        {"", "forward layers.1", 55, 85},
                                        {"", "backward <root>", 85, 95},
                                        {"", "backward layers.1", 95, 160},
                                        {"", "backward layers.0", 160, 227.5},
                                        {"", "wait for reduce-scatters", 227.5, 257.5}});
}

// Two microbatches: the first ends at 210 without waiting for its reduce-scatters (they run
// until 240 under the second's forward), and the second, shifted by 210 from the first
// except where the streams are still busy, ends as the first did: 450 us, 70 of them waiting.
TEST(Simulate, OnlyTheLastMicrobatchWaitsForItsReduceScatters) {
  const Prediction p = simulate_step(golden_plan("tied_lm"), round_costs(), 2);
  EXPECT_DOUBLE_EQ(p.step_us, 450);
  EXPECT_DOUBLE_EQ(p.compute_us, 380);
  EXPECT_DOUBLE_EQ(p.exposed_comm_us, 70);
  int waits = 0;
  for (const Span& s : on_track(p, "compute")) waits += s.name == "wait for reduce-scatters";
  EXPECT_EQ(waits, 1);
}

// One stream for every collective: the second microbatch's first all-gather queues behind
// the first microbatch's reduce-scatters (240 instead of 210), so compute waits 40 us for it.
TEST(Simulate, AUnifiedStreamQueuesTheNextGathersBehindTheReduceScatters) {
  Plan plan = golden_plan("tied_lm");
  plan.policy.unified_stream = true;
  const Prediction one = simulate_step(plan, round_costs(), 1);
  EXPECT_DOUBLE_EQ(one.step_us, 240);  // nothing contends within one microbatch here
  const Prediction p = simulate_step(plan, round_costs(), 2);
  EXPECT_DOUBLE_EQ(p.step_us, 480);
  EXPECT_DOUBLE_EQ(p.exposed_comm_us, 100);
  EXPECT_TRUE(on_track(p, "all_gather").empty());
  EXPECT_EQ(on_track(p, "unified").size(), 16u);  // 5 gathers and 3 reduce-scatters each
  const std::vector<Span> compute = on_track(p, "compute");
  const auto second_wait = std::find_if(compute.begin(), compute.end(), [](const Span& s) {
    return s.name == "wait for all-gather of <root>" && s.start == 210;
  });
  ASSERT_NE(second_wait, compute.end());
  EXPECT_DOUBLE_EQ(second_wait->end, 250);
}

// HSDP: after the last microbatch each unit's reduce-scatter is followed on the same stream by
// its all-reduce across replicas (7 us here): 150-165-172, 210-225-232, 232-247-254.
TEST(Simulate, HybridShardingAllReducesAfterEachReduceScatterOfTheLastMicrobatch) {
  Plan plan = golden_plan("tied_lm_hsdp");  // 2 x 2 on one stream: separate ones to read it
  plan.policy.unified_stream = false;
  const Prediction p = simulate_step(plan, round_costs(), 1);
  EXPECT_DOUBLE_EQ(p.step_us, 254);
  EXPECT_DOUBLE_EQ(p.exposed_comm_us, 64);
  expect_spans(on_track(p, "reduce_scatter"),
               {{"", "reduce-scatter of layers.1", 150, 165},
                {"", "all-reduce across replicas of layers.1", 165, 172},
                {"", "reduce-scatter of layers.0", 210, 225},
                {"", "all-reduce across replicas of layers.0", 225, 232},
                {"", "reduce-scatter of <root>", 232, 247},
                {"", "all-reduce across replicas of <root>", 247, 254}});
  // Not after an earlier microbatch: two microbatches all-reduce once per unit.
  int all_reduces = 0;
  for (const Span& s : on_track(simulate_step(plan, round_costs(), 2), "reduce_scatter")) {
    all_reduces += s.name.rfind("all-reduce", 0) == 0;
  }
  EXPECT_EQ(all_reduces, 3);
}

// Bandwidth: bytes over bytes per us, on top of the latency; the unit's unsharded bytes for
// an all-gather, its gradient bytes in the reduce dtype for a reduce-scatter.
TEST(Simulate, CollectiveTimeIsLatencyPlusBytesOverBandwidth) {
  CollectiveCost c;
  c.latency_us = 3;
  c.bytes_per_us = 1000;
  EXPECT_DOUBLE_EQ(c.time_us(50000), 53);
  EXPECT_DOUBLE_EQ(CollectiveCost{}.time_us(50000), 0);

  StepCosts costs;
  costs.all_gather.bytes_per_us = 41216.0 / 4;          // <root>'s 41216 bytes in 4 us
  costs.reduce_scatter.bytes_per_us = 4.0 * 12704 / 8;  // a block's 12704 fp32 gradients in 8 us
  const Prediction p = simulate_step(golden_plan("tied_lm"), costs, 1);
  const std::vector<Span> gathers = on_track(p, "all_gather");
  ASSERT_FALSE(gathers.empty());
  EXPECT_DOUBLE_EQ(gathers[0].end - gathers[0].start, 4);
  const std::vector<Span> reduces = on_track(p, "reduce_scatter");
  ASSERT_FALSE(reduces.empty());
  EXPECT_DOUBLE_EQ(reduces[0].end - reduces[0].start, 8);  // layers.1
}

// Free communication: the step is compute alone, the loss and the optimizer included, and a
// checkpointed unit pays its forward again in backward.
// The loss's all-reduce closes the step after the optimizer: issued on the reduce stream at
// 240, where the reduce-scatters ended, and waited for: 12 more us, exposed.
TEST(Simulate, TheLosssAllReduceClosesTheStep) {
  StepCosts costs = round_costs();
  costs.step_end_us = 12;
  const Prediction p = simulate_step(golden_plan("tied_lm"), costs, 1);
  EXPECT_DOUBLE_EQ(p.step_us, 252);
  EXPECT_DOUBLE_EQ(p.exposed_comm_us, 62);
  const auto compute = on_track(p, "compute");
  EXPECT_EQ(compute.back().name, "wait for the loss's all-reduce");
  EXPECT_DOUBLE_EQ(compute.back().start, 240);
  EXPECT_DOUBLE_EQ(compute.back().end, 252);
  EXPECT_EQ(on_track(p, "reduce_scatter").back().name, "all-reduce of the loss");
}

TEST(Simulate, WithoutCommunicationCostTheStepIsItsCompute) {
  StepCosts costs = round_costs();
  costs.all_gather = costs.reduce_scatter = costs.all_reduce = CollectiveCost{};
  costs.loss_us = 4;
  costs.optimizer_us = 9;
  const Prediction p = simulate_step(golden_plan("tied_lm"), costs, 3);
  EXPECT_DOUBLE_EQ(p.exposed_comm_us, 0);
  EXPECT_DOUBLE_EQ(p.step_us, 3 * (190 + 4) + 9);
  EXPECT_DOUBLE_EQ(p.compute_us, p.step_us);

  Plan checkpointed = golden_plan("tied_lm");
  for (Unit& unit : checkpointed.units) unit.checkpoint = unit.name != "<root>";
  EXPECT_DOUBLE_EQ(simulate_step(checkpointed, costs, 1).step_us, 190 + 4 + 9 + 30 + 30);
}

TEST(Simulate, RefusesNoMicrobatchAndNegativeCosts) {
  const Plan plan = golden_plan("tied_lm");
  EXPECT_MFSDP_ERROR(simulate_step(plan, round_costs(), 0), ExitCode::kUsage,
                     "at least one microbatch");
  StepCosts costs = round_costs();
  costs.backward_us["layers.0"] = -1;
  EXPECT_MFSDP_ERROR(simulate_step(plan, costs, 1), ExitCode::kUsage,
                     "the compute time of layers.0 must be a finite number >= 0");
  costs = round_costs();
  costs.reduce_scatter.bytes_per_us = -5;
  EXPECT_MFSDP_ERROR(simulate_step(plan, costs, 1), ExitCode::kUsage,
                     "reduce-scatter bandwidth must be a finite number >= 0");
}

}  // namespace
}  // namespace mfsdp::predict
