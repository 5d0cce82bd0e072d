#pragma once
// `mfsdp show --predict`: a plan's step predicted on a profiled machine (schema/cost_model.h,
// schema/simulate.h), and beside it, when given, what a run measured: its --metrics file
// (step time, exposed communication) and its --trace file (per-unit times). No LibTorch.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "schema/cost_model.h"
#include "schema/plan.h"
#include "schema/profile.h"
#include "schema/simulate.h"

namespace mfsdp::cli {

struct PredictRequest {
  std::string profile;  // FILE or a built-in's name
  std::optional<int64_t> microbatches;
  std::optional<int64_t> microbatch_size;  // samples per microbatch on a rank
  std::optional<double> compute_scale;
  std::optional<std::string> optimizer;
  std::string metrics_path;    // a run's --metrics file, or ""
  std::string run_trace_path;  // a run's --trace file, or ""
};

// Per unit, milliseconds per step.
struct UnitFigures {
  double forward_ms = 0, backward_ms = 0;  // as a run's trace draws them (nested units included)
  double all_gather_ms = 0, wait_ms = 0, reduce_scatter_ms = 0;
};

struct Measured {
  std::optional<double> step_ms, exposed_comm_ms;  // from --metrics
  int64_t steps = 0, ranks = 0;                    // the steps and ranks the medians are over
  std::map<std::string, UnitFigures> units;        // from --trace (no all_gather_ms/RS)
  int64_t traced_steps = 0;
};

struct PlanPrediction {
  schema::Profile profile;
  schema::CostModel model;
  schema::Prediction prediction;
  int64_t microbatches = 1;
  std::string optimizer;
  std::map<std::string, UnitFigures> units;  // from the timeline
  std::vector<std::string> unit_order;       // the plan's forward_order
  std::optional<Measured> measured;
};

// Defaults from the plan's training section: its microbatches (else 1), its optimizer (else
// adamw), its global batch split over the ranks and microbatches (else the traced batch).
// Throws what load_profile, step_costs and simulate_step throw, and Error(kUsage) for a
// metrics or trace file that cannot be read.
PlanPrediction predict_plan(const schema::Plan& plan, const PredictRequest& request);
// The same with the profile loaded already (request.profile is not read).
PlanPrediction predict_plan(const schema::Plan& plan, const schema::Profile& profile,
                            const PredictRequest& request);

// What a rank of `plan` holds at its peak, in bytes: sharded parameters and main gradients,
// the optimizer's state (adam and adamw: two moments; sgd: one momentum buffer; in the main
// gradients' dtype), the gathered slots, and the activations the trace measured, scaled
// linearly to `microbatch_samples`. None without a trace's activations.
// The optimizer a prediction counts: --optimizer, else the training defaults' (the plan's
// `training.optimizer`), else adamw.
std::string predicted_optimizer(const std::optional<schema::Training>& training,
                                const PredictRequest& request);

// What a rank holds besides activations: sharded parameters and main gradients, the
// optimizer's state (one buffer for sgd, two for adam and adamw) and the gathered slots.
int64_t rank_state_bytes(const schema::Plan& plan, const std::string& optimizer);
std::optional<int64_t> rank_memory_bytes(const schema::Plan& plan, const std::string& optimizer,
                                         int64_t microbatch_samples);

std::string render_prediction_text(const PlanPrediction& p, const std::string& plan_path);
nlohmann::ordered_json prediction_json(const PlanPrediction& p);

// A run's --metrics file: per step the slowest rank's step_ms, and every rank's
// exposed_comm_ms; the medians over the steps after the first (all of them when there is
// one). Error(kUsage) for a file with no step lines.
Measured read_run_metrics(const std::string& path);
// A run's --trace file: per unit the mean over ranks of its forward, backward and
// wait-for-all-gather spans per traced step.
void read_run_trace(const std::string& path, Measured& into);

}  // namespace mfsdp::cli
