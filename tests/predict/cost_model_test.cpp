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
using schema::UnitWork;

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

// A trace runs a checkpointed unit checkpointed, so its backward time holds the recompute; the
// replay recomputes at pre_backward, so the step's compute is still the traced step's.
TEST(CostModel, ACheckpointedUnitsRecomputeIsPaidOnce) {
  Plan plan = traced();
  for (schema::Unit& unit : plan.units) unit.checkpoint = unit.name == "layers.0";
  const CostModel m = step_costs(plan, profile(), {});  // compute x 2
  EXPECT_DOUBLE_EQ(m.costs.recompute_us.at("layers.0"), 250 * 2);
  EXPECT_DOUBLE_EQ(m.costs.backward_us.at("layers.0"), (500 - 250) * 2);
  EXPECT_DOUBLE_EQ(m.costs.backward_us.at("layers.1"), 500 * 2);
  const Prediction p = simulate_step(plan, m.costs, 1);
  double traced_ms = *plan.trace->loss_ms;
  for (const UnitTime& t : plan.trace->times) {
    traced_ms += *t.pre_forward_ms + *t.post_forward_ms + t.backward_ms;
  }
  EXPECT_NEAR(p.compute_us, traced_ms * 1000 * 2 + m.costs.optimizer_us, 1e-6);
}

// Round numbers for the analytic model: float32 products at 10 TFLOP/s (10^7 FLOP per µs),
// bfloat16 at 100, memory at 1000 GB/s (10^6 bytes per µs).
ComputeRates round_rates() {
  ComputeRates r;
  r.tflops = {{"float32", 10}, {"bfloat16", 100}};
  r.memory_gbps = 1000;
  r.matmul = {0.5, 10};
  r.attention = {0.25, 20};
  r.elementwise = {0.8, 2};
  r.embedding = {0.5, 4};
  return r;
}

// tied_lm (float32) traced on meta tensors: layers.0's forward holds 4 products of 4 x 10^8
// FLOPs over 10^6 bytes and 10 elementwise operators over 4 x 10^6 bytes; its backward twice
// that, plus one lookup's backward of 10^6 bytes.
Plan meta_traced() {
  Plan plan = tied_lm();
  Trace trace;
  trace.inputs = {"2x16:int64"};
  trace.device = "meta";
  for (const std::string& unit : plan.forward_order) {
    schema::UnitWork w{unit, {}, {}, {}};
    if (unit == "layers.0") {
      w.pre_forward.matmul = {400'000'000, 1'000'000, 4};
      w.pre_forward.elementwise = {1000, 4'000'000, 10};
      w.backward.matmul = {800'000'000, 2'000'000, 8};
      w.backward.elementwise = {2000, 8'000'000, 20};
      w.backward.embedding = {0, 1'000'000, 1};
    }
    trace.work.push_back(w);
  }
  trace.loss_work = schema::Work{};
  trace.loss_work->attention = {50'000'000, 0, 1};
  plan.trace = trace;
  return plan;
}

TEST(CostModel, TimesAMetaTracesWorkAtTheProfilesRates) {
  Profile p = profile();
  p.compute.rates = round_rates();
  const CostModel m = step_costs(meta_traced(), p, {});
  // Products: 4 x 10 µs + max(4e8 FLOPs / (0.5 x 1e7), 1e6 bytes / (0.8 x 1e6)) = 40 + 80;
  // elementwise: 10 x 2 µs + 4e6 / 0.8e6 = 20 + 5.
  EXPECT_DOUBLE_EQ(m.costs.forward_us.at("layers.0"), 120 + 25);
  // Backward: 80 + 160, 40 + 10, and the lookup's 4 + 1e6 / 0.5e6.
  EXPECT_DOUBLE_EQ(m.costs.backward_us.at("layers.0"), 240 + 50 + 6);
  EXPECT_DOUBLE_EQ(m.costs.post_forward_us.at("layers.0"), 0);
  EXPECT_DOUBLE_EQ(m.costs.recompute_us.at("layers.0"), 145);
  // The loss's attention: 20 µs + 5e7 / (0.25 x 1e7).
  EXPECT_DOUBLE_EQ(m.costs.loss_us, 20 + 20);
  EXPECT_EQ(m.calibration, 1);
  EXPECT_NE(m.notes[0].find("float32 10 TFLOP/s, 1000 GB/s"), std::string::npos) << m.notes[0];

  // A microbatch of twice the traced batch doubles FLOPs and bytes, not the operators.
  PredictOptions twice;
  twice.microbatch_samples = 4;
  EXPECT_DOUBLE_EQ(step_costs(meta_traced(), p, twice).costs.forward_us.at("layers.0"),
                   40 + 160 + 20 + 10);
  // bfloat16 products at 10 times the rate: 8 µs of FLOPs, still above the 1.25 µs of bytes.
  Plan bf16 = meta_traced();
  bf16.policy.param_dtype = "bfloat16";
  EXPECT_DOUBLE_EQ(step_costs(bf16, p, {}).costs.forward_us.at("layers.0"), 40 + 8 + 25);
  // --compute-scale multiplies the analytic times too.
  PredictOptions scaled;
  scaled.compute_scale = 2;
  EXPECT_DOUBLE_EQ(step_costs(meta_traced(), p, scaled).costs.loss_us, 80);
  // A dtype without a peak is refused, naming the ones there are.
  bf16.policy.param_dtype = "float16";
  EXPECT_MFSDP_ERROR(step_costs(bf16, p, {}), ExitCode::kUsage,
                     "no peak for float16 products (compute.rates.tflops has bfloat16, float32)");
}

// A checkpointed unit's traced backward holds its recompute: the replay's recompute is its
// forward, and its backward the rest.
TEST(CostModel, AMetaTracesCheckpointedBackwardLosesItsRecompute) {
  Plan plan = meta_traced();
  for (schema::Unit& unit : plan.units) unit.checkpoint = unit.name == "layers.0";
  Profile p = profile();
  p.compute.rates = round_rates();
  const CostModel m = step_costs(plan, p, {});
  EXPECT_DOUBLE_EQ(m.costs.recompute_us.at("layers.0"), 145);
  // The backward less the forward: 4 products of 4e8 over 1e6 bytes, 10 elementwise, 1 lookup.
  EXPECT_DOUBLE_EQ(m.costs.backward_us.at("layers.0"), 120 + 25 + 6);
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
                     "it has the units' work but no times, and profile 'test' has no compute "
                     "rates to time it");
  PredictOptions bad;
  bad.optimizer = "lamb";
  EXPECT_MFSDP_ERROR(step_costs(traced(), profile(), bad), ExitCode::kUsage,
                     "'lamb' is not sgd, adam or adamw");
}

}  // namespace
}  // namespace mfsdp::predict
