#include "predict/cost_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <sstream>

#include "schema/error.h"
#include "schema/optimizer.h"

namespace mfsdp::predict {

using schema::Group;
using schema::Plan;
using schema::Trace;
using schema::Unit;
using schema::UnitTime;
using schema::UnitWork;
using schema::Work;
namespace {

std::string number_text(double value) {
  std::ostringstream out;
  out.precision(3);
  out << value;
  return out.str();
}

// The trace ran the plan's checkpointed units checkpointed, so their backward holds their
// recompute; the replay pays a recompute of its own at pre_backward (a checkpointed unit holds
// no other unit, so its recompute is its own forward).
std::set<std::string> checkpointed_units(const Plan& plan) {
  std::set<std::string> units;
  for (const Unit& unit : plan.units) {
    if (unit.checkpoint) units.insert(unit.name);
  }
  return units;
}

// A CPU trace's times, scaled.
void time_costs(const Plan& plan, CostModel& model) {
  const Trace& trace = *plan.trace;
  StepCosts& costs = model.costs;
  const std::set<std::string> checkpointed = checkpointed_units(plan);
  const double us = 1000 * model.compute_scale;
  for (const UnitTime& t : trace.times) {
    costs.forward_us[t.unit] = *t.pre_forward_ms * us;
    costs.post_forward_us[t.unit] = *t.post_forward_ms * us;
    costs.recompute_us[t.unit] = t.forward_ms * us;
    const double recomputed = checkpointed.count(t.unit) ? t.forward_ms : 0;
    costs.backward_us[t.unit] = std::max(0.0, t.backward_ms - recomputed) * us;
  }
  if (trace.loss_ms) {
    costs.loss_us = *trace.loss_ms * us;
  } else {
    model.notes.push_back("compute: the loss is not counted (the trace has no loss_ms)");
  }
}

// `work` less `less`, class by class, never below 0.
Work without(Work work, const Work& less) {
  for (auto [from, minus] : {std::pair{&work.matmul, &less.matmul},
                             {&work.attention, &less.attention},
                             {&work.elementwise, &less.elementwise},
                             {&work.embedding, &less.embedding}}) {
    from->flops = std::max<int64_t>(0, from->flops - minus->flops);
    from->bytes = std::max<int64_t>(0, from->bytes - minus->bytes);
    from->ops = std::max<int64_t>(0, from->ops - minus->ops);
  }
  return work;
}

// A meta trace's work, timed at the profile's rates. Its FLOPs and bytes grow with the
// microbatch, its operators do not.
void work_costs(const Plan& plan, const ComputeRates& rates, CostModel& model) {
  const Trace& trace = *plan.trace;
  StepCosts& costs = model.costs;
  const std::string dtype = compute_dtype(plan);
  const double samples =
      static_cast<double>(model.microbatch_samples) / static_cast<double>(model.traced_batch);
  const std::set<std::string> checkpointed = checkpointed_units(plan);
  const auto us = [&](const Work& work) {
    return work_us(work, rates, dtype, samples) * model.calibration;
  };
  for (const UnitWork& w : trace.work) {
    Work forward = w.pre_forward;
    forward += w.post_forward;
    costs.forward_us[w.unit] = us(w.pre_forward);
    costs.post_forward_us[w.unit] = us(w.post_forward);
    costs.recompute_us[w.unit] = us(forward);
    costs.backward_us[w.unit] =
        us(checkpointed.count(w.unit) ? without(w.backward, forward) : w.backward);
  }
  if (trace.loss_work) costs.loss_us = us(*trace.loss_work);
}

}  // namespace

int64_t traced_batch(const Trace& trace) {
  if (trace.inputs.empty()) return 1;
  const std::string& spec = trace.inputs.front();
  int64_t batch = 0;
  for (const char c : spec) {
    if (!std::isdigit(static_cast<unsigned char>(c))) break;
    if (batch > (int64_t{1} << 40)) return 1;
    batch = batch * 10 + (c - '0');
  }
  return batch >= 1 ? batch : 1;
}

CostModel step_costs(const Plan& plan, const Profile& profile, const PredictOptions& options) {
  if (!plan.trace) {
    fail(ExitCode::kUsage,
         "the plan has no trace: predicting a step's time needs the unit times that `mfsdp plan "
         "--trace-input SHAPE` measures (docs/predict.md); its memory is in the plan already");
  }
  const Trace& trace = *plan.trace;
  const bool meta = trace.device.has_value();
  if (meta && !profile.compute.rates) {
    fail(ExitCode::kUsage,
         "the plan's trace ran on " + *trace.device +
             " tensors (--trace-device meta): it has the units' work but no times, and profile '" +
             profile.name +
             "' has no compute rates to time it (compute.rates); use a built-in GPU profile (" +
             builtin_profile_list() +
             "), add rates to the profile, or re-plan with --trace-input on the CPU "
             "(docs/predict.md#analytic-compute)");
  }
  for (const UnitTime& t : trace.times) {
    if (!t.pre_forward_ms || !t.post_forward_ms) {
      fail(ExitCode::kUsage, "the plan's trace has no forward split (pre_forward_ms of " + t.unit +
                                 "): it was made by an older mfsdp; re-plan with --trace-input");
    }
  }
  if (options.compute_scale &&
      !(*options.compute_scale > 0 && std::isfinite(*options.compute_scale))) {
    fail(ExitCode::kUsage,
         "--compute-scale must be a number > 0, not " + number_text(*options.compute_scale));
  }
  if (options.microbatch_samples && *options.microbatch_samples < 1) {
    fail(ExitCode::kUsage, "a microbatch has at least one sample, not " +
                               std::to_string(*options.microbatch_samples));
  }
  if (!schema::find_optimizer(options.optimizer)) {
    fail(ExitCode::kUsage,
         "optimizer '" + options.optimizer + "' is not " + schema::optimizer_choices());
  }

  CostModel model;
  model.traced_batch = traced_batch(trace);
  model.microbatch_samples = options.microbatch_samples.value_or(model.traced_batch);
  if (meta) {
    model.calibration = options.compute_scale.value_or(1);
    model.notes.push_back("compute: the trace's work at the rates of profile '" + profile.name +
                          "' (" + rates_summary(*profile.compute.rates, compute_dtype(plan)) +
                          "; docs/predict.md#analytic-compute)" +
                          (options.compute_scale
                               ? ", x " + number_text(model.calibration) + " (--compute-scale)"
                               : std::string()));
  } else if (options.compute_scale) {
    model.calibration = *options.compute_scale;
    model.notes.push_back("compute: the trace's times x " + number_text(model.calibration) +
                          " (--compute-scale)");
  } else if (trace.calibration_gflops && profile.compute.reference_gflops) {
    model.calibration = *trace.calibration_gflops / *profile.compute.reference_gflops;
    model.notes.push_back("compute: the trace's times x " + number_text(model.calibration) +
                          " (reference matmul " + number_text(*trace.calibration_gflops) +
                          " GFLOP/s where traced, " +
                          number_text(*profile.compute.reference_gflops) + " on the ranks)");
  } else {
    model.notes.push_back(std::string("compute: the trace's times as measured, since ") +
                          (trace.calibration_gflops
                               ? "profile '" + profile.name + "' has no reference_gflops"
                               : "the trace has no calibration_gflops") +
                          "; give --compute-scale for another device");
  }
  if (profile.compute.run_factor) {
    model.calibration *= *profile.compute.run_factor;
    model.notes.push_back("compute: x " + number_text(*profile.compute.run_factor) +
                          " more, as a run measured it (profile '" + profile.name + "' calibrated" +
                          (profile.calibration ? " against " + profile.calibration->metrics : "") +
                          ")");
  }
  model.compute_scale = model.calibration * static_cast<double>(model.microbatch_samples) /
                        static_cast<double>(model.traced_batch);
  if (model.microbatch_samples != model.traced_batch) {
    model.notes.push_back(
        std::string(meta ? "compute: the work's FLOPs and bytes (not its operators)"
                         : "compute: scaled linearly") +
        " from the traced batch of " + std::to_string(model.traced_batch) + " to microbatches of " +
        std::to_string(model.microbatch_samples));
  }

  StepCosts& costs = model.costs;
  if (meta) {
    work_costs(plan, *profile.compute.rates, model);
  } else {
    time_costs(plan, model);
  }

  std::string note;
  costs.all_gather = collective_cost(profile, "all_gather", plan.mesh.shard_size, &note);
  if (!note.empty()) model.notes.push_back(note);
  note.clear();
  costs.reduce_scatter = collective_cost(profile, "reduce_scatter", plan.mesh.shard_size, &note);
  if (!note.empty()) model.notes.push_back(note);
  note.clear();
  if (plan.mesh.replicate_size > 1) {
    costs.all_reduce = collective_cost(profile, "all_reduce", plan.mesh.replicate_size, &note);
    if (!note.empty()) model.notes.push_back(note);
  }

  if (profile.compute.contention) {
    costs.contention = *profile.compute.contention;
    if (costs.contention > 0) {
      model.notes.push_back("compute: slowed to 1 / (1 + " + number_text(costs.contention) +
                            " x n) of its speed while n collectives run beside it (profile '" +
                            profile.name + "')");
    }
  }

  if (plan.mesh.world_size > 1) {  // the loss's all-reduce: one double over every rank
    const bool has = std::any_of(profile.collectives.begin(), profile.collectives.end(),
                                 [](const CollectiveProfile& c) { return c.kind == "all_reduce"; });
    if (has) {
      note.clear();
      costs.step_end_us =
          collective_cost(profile, "all_reduce", plan.mesh.world_size, &note).time_us(8);
      if (!note.empty()) model.notes.push_back(note);
    } else {
      model.notes.push_back("the loss's all-reduce at the end of a step is not counted (profile '" +
                            profile.name + "' has no all_reduce)");
    }
  }

  int64_t elements = 0;  // the optimizer's per rank: every trainable group's shard
  for (const Unit& unit : plan.units) {
    for (const Group& group : unit.groups) {
      if (group.requires_grad) elements += group.shard_numel;
    }
  }
  const auto per = profile.compute.optimizer_ns_per_element.find(options.optimizer);
  if (per == profile.compute.optimizer_ns_per_element.end()) {
    model.notes.push_back("optimizer: not counted (profile '" + profile.name + "' has no " +
                          options.optimizer + " time per element)");
  } else {
    costs.optimizer_us = per->second * static_cast<double>(elements) / 1000;
  }
  return model;
}

}  // namespace mfsdp::predict
