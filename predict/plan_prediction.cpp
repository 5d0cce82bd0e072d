#include "predict/plan_prediction.h"

#include <algorithm>
#include <cmath>

#include "predict/memory_fit.h"
#include "schema/error.h"
#include "schema/optimizer.h"

namespace mfsdp::predict {
namespace {

// The per-rank microbatch the plan's training defaults describe, if they do evenly.
std::optional<int64_t> training_microbatch(const schema::Plan& plan, int64_t microbatches) {
  if (!plan.training || !plan.training->global_batch) return std::nullopt;
  const int64_t per_step = plan.mesh.world_size * microbatches;
  const int64_t global = *plan.training->global_batch;
  if (per_step < 1 || global % per_step != 0) return std::nullopt;
  return global / per_step;
}

std::map<std::string, UnitFigures> unit_figures(const Prediction& p) {
  std::map<std::string, UnitFigures> units;
  for (const UnitWindow& w : p.windows) {
    UnitFigures& u = units[w.unit];
    (w.phase == "forward" ? u.forward_ms : u.backward_ms) += (w.end_us - w.start_us) / 1000;
  }
  for (const PredictedSpan& s : p.timeline) {
    if (s.unit.empty()) continue;
    const double d = (s.end_us - s.start_us) / 1000;
    if (s.kind == "all_gather") units[s.unit].all_gather_ms += d;
    if (s.kind == "wait_all_gather") units[s.unit].wait_ms += d;
    if (s.kind == "reduce_scatter" || s.kind == "all_reduce") units[s.unit].reduce_scatter_ms += d;
  }
  return units;
}

}  // namespace

std::map<std::string, double> compute_by_kind(const Prediction& p) {
  std::map<std::string, double> by;
  for (const PredictedSpan& s : p.timeline) {
    if (s.track != "compute") continue;
    by[s.kind] += (s.end_us - s.start_us) / 1000;
  }
  return by;
}

PlanPrediction predict_plan(const schema::Plan& plan, const PredictRequest& request) {
  return predict_plan(plan, load_profile(request.profile), request);
}

PlanPrediction predict_plan(const schema::Plan& plan, const Profile& profile,
                            const PredictRequest& request) {
  PlanPrediction p;
  p.profile = profile;
  p.microbatches = request.microbatches.value_or(
      plan.training && plan.training->microbatches ? *plan.training->microbatches : 1);
  if (p.microbatches < 1) {
    fail(ExitCode::kUsage,
         "--microbatches must be at least 1, not " + std::to_string(p.microbatches));
  }
  p.optimizer = predicted_optimizer(plan.training, request);
  PredictOptions options;
  options.compute_scale = request.compute_scale;
  options.optimizer = p.optimizer;
  options.microbatch_samples =
      request.microbatch_size ? request.microbatch_size : training_microbatch(plan, p.microbatches);
  p.model = step_costs(plan, p.profile, options);
  p.prediction = simulate_step(plan, p.model.costs, p.microbatches);
  p.units = unit_figures(p.prediction);
  p.unit_order = plan.forward_order;
  if (!request.metrics_path.empty() || !request.run_trace_path.empty()) {
    Measured m;
    if (!request.metrics_path.empty()) m = read_run_metrics(request.metrics_path);
    if (!request.run_trace_path.empty()) read_run_trace(request.run_trace_path, m);
    p.measured = m;
  }
  return p;
}

std::optional<int64_t> rank_memory_bytes(const schema::Plan& plan, const std::string& optimizer,
                                         int64_t microbatch_samples) {
  const RankMemory memory = rank_memory(plan, optimizer, microbatch_samples);
  if (!memory.activations) return std::nullopt;
  return memory.total();
}

std::string predicted_optimizer(const std::optional<schema::Training>& training,
                                const PredictRequest& request) {
  if (request.optimizer) return *request.optimizer;
  return training && training->optimizer ? *training->optimizer : schema::kDefaultOptimizer;
}

int64_t rank_state_bytes(const schema::Plan& plan, const std::string& optimizer) {
  const RankMemory memory = rank_memory(plan, optimizer, 1);
  return memory.sharded() + memory.slots;
}

}  // namespace mfsdp::predict
