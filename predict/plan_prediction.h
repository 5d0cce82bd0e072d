#pragma once
// A plan's step predicted on a profiled machine (docs/predict.md): the costs (cost_model.h)
// replayed on the plan's schedule (simulate.h) with the microbatches, microbatch size and
// optimizer a request or the plan's training defaults give, per-unit figures from the
// timeline, and what a rank holds at its peak. `mfsdp show --predict`, `mfsdp diff --profile`
// and the plan search (search/plan_search.h) all predict through here. No LibTorch here.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "predict/cost_model.h"
#include "predict/profile.h"
#include "predict/run_measurement.h"
#include "predict/simulate.h"
#include "schema/plan.h"

namespace mfsdp::predict {

struct PredictRequest {
  std::string profile;  // FILE or a built-in's name
  std::optional<int64_t> microbatches;
  std::optional<int64_t> microbatch_size;  // samples per microbatch on a rank
  std::optional<double> compute_scale;
  std::optional<std::string> optimizer;
  std::string metrics_path;    // a run's --metrics file, or ""
  std::string run_trace_path;  // a run's --trace file, or ""
};

struct PlanPrediction {
  Profile profile;
  CostModel model;
  Prediction prediction;
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
PlanPrediction predict_plan(const schema::Plan& plan, const Profile& profile,
                            const PredictRequest& request);

// The optimizer a prediction counts: the request's, else the training defaults' (the plan's
// `training.optimizer`), else adamw.
std::string predicted_optimizer(const std::optional<schema::Training>& training,
                                const PredictRequest& request);

// What a rank holds besides activations: sharded parameters and main gradients, the
// optimizer's state (schema/optimizer.h: one buffer for sgd, two for adam and adamw, in the
// main gradients' dtype) and the gathered slots.
int64_t rank_state_bytes(const schema::Plan& plan, const std::string& optimizer);
// What a rank of `plan` holds at its peak, in bytes: rank_state_bytes and the activations the
// trace measured, scaled linearly to `microbatch_samples`. None without a trace's activations.
std::optional<int64_t> rank_memory_bytes(const schema::Plan& plan, const std::string& optimizer,
                                         int64_t microbatch_samples);

// Compute's own time in a prediction by span kind ("forward", "loss", ...), in ms.
std::map<std::string, double> compute_by_kind(const Prediction& prediction);

}  // namespace mfsdp::predict
