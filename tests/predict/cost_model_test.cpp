#include "predict/cost_model.h"

#include <gtest/gtest.h>

#include <string>

#include "schema/error.h"
#include "schema/plan_json.h"
#include "tests/planner/test_support.h"  // EXPECT_MFSDP_ERROR

namespace mfsdp::predict {
namespace {

using schema::ParseResult;
using schema::Plan;
using schema::read_plan_file;
using schema::Trace;
using schema::UnitTime;

Plan tied_lm() {
  ParseResult r = read_plan_file(std::string(MFSDP_SOURCE_DIR) + "/plans/tied_lm.plan.json");
  EXPECT_TRUE(r.problems.empty());
  return r.plan;
}

// tied_lm with a trace of batch 2: made-up times, in ms.
Plan traced() {
  Plan plan = tied_lm();
  Trace trace;
  trace.inputs = {"2x16:int64"};
  for (const std::string& unit : plan.forward_order) {
    UnitTime t;
    t.unit = unit;
    t.forward_ms = unit == "<root>" ? 1.0 : 0.25;
    t.backward_ms = unit == "<root>" ? 0.1 : 0.5;
    t.pre_forward_ms = unit == "<root>" ? 0.05 : 0.25;
    t.post_forward_ms = unit == "layers.1" ? 0.4 : 0.0;
    trace.times.push_back(t);
  }
  trace.loss_ms = 0.2;
  trace.calibration_gflops = 100;
  plan.trace = trace;
  return plan;
}

Profile profile() {
  Profile p;
  p.name = "test";
  p.collectives.push_back({"all_gather", 2, {10, 1000}, {}});
  p.collectives.push_back({"reduce_scatter", 2, {20, 500}, {}});
  p.compute.reference_gflops = 50;
  p.compute.optimizer_ns_per_element = {{"adamw", 2.0}};
  return p;
}

TEST(CostModel, ScalesTheTracesTimesByTheCalibrationAndTheMicrobatch) {
  PredictOptions options;
  options.microbatch_samples = 4;  // twice the traced batch
  const CostModel m = step_costs(traced(), profile(), options);
  EXPECT_EQ(m.traced_batch, 2);
  EXPECT_DOUBLE_EQ(m.calibration, 2);  // 100 GFLOP/s where traced, 50 on the ranks
  EXPECT_DOUBLE_EQ(m.compute_scale, 4);
  EXPECT_DOUBLE_EQ(m.costs.forward_us.at("<root>"), 0.05 * 1000 * 4);
  EXPECT_DOUBLE_EQ(m.costs.forward_us.at("layers.0"), 250 * 4);
  EXPECT_DOUBLE_EQ(m.costs.post_forward_us.at("layers.1"), 400 * 4);
  EXPECT_DOUBLE_EQ(m.costs.backward_us.at("layers.1"), 500 * 4);
  EXPECT_DOUBLE_EQ(m.costs.recompute_us.at("<root>"), 1000 * 4);
  EXPECT_DOUBLE_EQ(m.costs.loss_us, 200 * 4);
  EXPECT_EQ(m.costs.all_gather.latency_us, 10);
  EXPECT_EQ(m.costs.reduce_scatter.bytes_per_us, 500);
  // AdamW over the rank's shards: 5152 + 6352 + 6352 elements at 2 ns.
  EXPECT_DOUBLE_EQ(m.costs.optimizer_us, 2.0 * (5152 + 6352 + 6352) / 1000);
  EXPECT_EQ(m.costs.step_end_us, 0);  // the profile has no all_reduce
  Profile with_all_reduce = profile();
  with_all_reduce.collectives.push_back({"all_reduce", 2, {70, 8}, {}});
  EXPECT_DOUBLE_EQ(step_costs(traced(), with_all_reduce, options).costs.step_end_us, 71);
}

TEST(CostModel, ACalibratedProfilesRunFactorMultipliesCompute) {
  Profile calibrated = profile();
  calibrated.compute.run_factor = 1.5;
  const CostModel m = step_costs(traced(), calibrated, {});
  EXPECT_DOUBLE_EQ(m.calibration, 3);  // the matmul's 2, times the run's 1.5
  EXPECT_DOUBLE_EQ(m.costs.backward_us.at("layers.0"), 500 * 3);
  EXPECT_DOUBLE_EQ(m.costs.optimizer_us, 2.0 * (5152 + 6352 + 6352) / 1000);  // measured apart
  bool said = false;
  for (const std::string& note : m.notes) said = said || note.find("x 1.5 more") != note.npos;
  EXPECT_TRUE(said);
}

TEST(CostModel, AGivenComputeScaleWinsAndEveryAssumptionIsANote) {
  PredictOptions options;
  options.compute_scale = 0.5;
  options.optimizer = "sgd";  // the profile has no sgd time
  const CostModel m = step_costs(traced(), profile(), options);
  EXPECT_DOUBLE_EQ(m.compute_scale, 0.5);
  EXPECT_DOUBLE_EQ(m.costs.backward_us.at("layers.0"), 250);
  EXPECT_EQ(m.costs.optimizer_us, 0);
  ASSERT_EQ(m.notes.size(), 3u);
  EXPECT_NE(m.notes[0].find("--compute-scale"), std::string::npos) << m.notes[0];
  EXPECT_NE(m.notes[1].find("has no all_reduce"), std::string::npos) << m.notes[1];
  EXPECT_NE(m.notes[2].find("has no sgd time"), std::string::npos) << m.notes[2];
}

TEST(CostModel, WithoutACalibrationTheTimesAreTakenAsTracedAndSaidSo) {
  Profile p = profile();
  p.compute.reference_gflops.reset();
  const CostModel m = step_costs(traced(), p, {});
  EXPECT_EQ(m.compute_scale, 1);
  EXPECT_NE(m.notes[0].find("has no reference_gflops"), std::string::npos) << m.notes[0];
}

TEST(CostModel, TheSimulatedComputeIsTheSumOfTheCosts) {
  const CostModel m = step_costs(traced(), profile(), {});
  const Prediction p = simulate_step(traced(), m.costs, 1);
  double sum = m.costs.loss_us + m.costs.optimizer_us;
  for (const auto* per : {&m.costs.forward_us, &m.costs.post_forward_us, &m.costs.backward_us}) {
    for (const auto& [unit, us] : *per) sum += us;
  }
  EXPECT_NEAR(p.compute_us, sum, 1e-9);
  EXPECT_NEAR(p.step_us, p.compute_us + p.exposed_comm_us, 1e-9);
}

TEST(CostModel, RefusesAPlanWithoutATraceOrWithoutTheForwardSplitOrTimes) {
  EXPECT_MFSDP_ERROR(step_costs(tied_lm(), profile(), {}), ExitCode::kUsage, "--trace-input SHAPE");
  Plan old = traced();
  old.trace->times[1].pre_forward_ms.reset();
  old.trace->times[1].post_forward_ms.reset();
  EXPECT_MFSDP_ERROR(step_costs(old, profile(), {}), ExitCode::kUsage,
                     "no forward split (pre_forward_ms of layers.0)");
  Plan meta = tied_lm();
  meta.trace = Trace{};
  meta.trace->inputs = {"2x16:int64"};
  meta.trace->device = "meta";
  EXPECT_MFSDP_ERROR(step_costs(meta, profile(), {}), ExitCode::kUsage,
                     "it has the units' activations and work but no times");
  PredictOptions bad;
  bad.optimizer = "lamb";
  EXPECT_MFSDP_ERROR(step_costs(traced(), profile(), bad), ExitCode::kUsage,
                     "'lamb' is not sgd, adam or adamw");
}

}  // namespace
}  // namespace mfsdp::predict
