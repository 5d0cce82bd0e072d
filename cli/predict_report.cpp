#include "cli/predict_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/byte_size.h"
#include "predict/memory_fit.h"

namespace mfsdp::cli {
namespace {

using nlohmann::ordered_json;

std::string ms(double value, int decimals = 2) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string error_text(double predicted, double measured) {
  if (measured <= 0) return "";
  const double e = 100 * (predicted - measured) / measured;
  return (e >= 0 ? "+" : "") + ms(e, 1) + " %";
}

}  // namespace

std::string render_prediction_text(const predict::PlanPrediction& p, const std::string& plan_path) {
  std::ostringstream out;
  const predict::Prediction& r = p.prediction;
  out << "prediction    " << plan_path << " on profile '" << p.profile.name << "' ("
      << p.profile.backend << ", " << p.profile.device << ")\n";
  out << "              " << p.microbatches << " microbatch" << (p.microbatches == 1 ? "" : "es")
      << " of " << p.model.microbatch_samples << " sample"
      << (p.model.microbatch_samples == 1 ? "" : "s") << " per rank, " << p.optimizer << "\n";
  out << "step          " << ms(r.step_us / 1000) << " ms = compute " << ms(r.compute_us / 1000)
      << " + exposed communication " << ms(r.exposed_comm_us / 1000);
  if (r.contention_us > 0) out << " + contention " << ms(r.contention_us / 1000);
  out << " ms\n";
  const std::map<std::string, double> by = predict::compute_by_kind(r);
  const auto part = [&](const char* kind) {
    const auto it = by.find(kind);
    return it == by.end() ? 0.0 : it->second;
  };
  out << "compute       forward " << ms(part("forward") + part("after_forward")) << ", loss "
      << ms(part("loss")) << ", backward " << ms(part("backward"));
  if (part("recompute") > 0) out << ", recompute " << ms(part("recompute"));
  out << ", optimizer " << ms(part("optimizer")) << " ms\n";
  // The critical path is compute's chain: its work and the waits that stretch it.
  std::vector<const predict::PredictedSpan*> waits;
  for (const predict::PredictedSpan& s : r.timeline) {
    if (s.track == "compute" && s.kind.rfind("wait_", 0) == 0) waits.push_back(&s);
  }
  std::stable_sort(waits.begin(), waits.end(), [](const auto* a, const auto* b) {
    return a->end_us - a->start_us > b->end_us - b->start_us;
  });
  out << "critical path compute " << ms((r.compute_us + r.contention_us) / 1000) << " ms";
  if (waits.empty()) {
    out << ", no wait: every collective is hidden\n";
  } else {
    out << ", then " << waits.size() << " wait" << (waits.size() == 1 ? "" : "s") << ":";
    for (size_t i = 0; i < waits.size() && i < 4; ++i) {
      out << (i ? "," : "") << " " << waits[i]->name << " "
          << ms((waits[i]->end_us - waits[i]->start_us) / 1000);
    }
    if (waits.size() > 4) out << ", ...";
    out << " ms\n";
  }
  const std::optional<predict::Measured>& m = p.measured;
  if (m && m->step_ms) {
    out << "measured      step " << ms(*m->step_ms) << " ms (median of " << m->steps
        << " steps after the first, slowest of " << m->ranks << " ranks)";
    if (m->exposed_comm_ms) out << ", exposed " << ms(*m->exposed_comm_ms) << " ms";
    out << "\nerror         step " << error_text(r.step_us / 1000, *m->step_ms);
    if (m->exposed_comm_ms) {
      out << ", exposed " << ms((r.exposed_comm_us / 1000) - *m->exposed_comm_ms) << " ms";
    }
    out << "\n";
  }
  const bool per_unit_measured = m && !m->units.empty();
  out << "per unit      ms per step" << (per_unit_measured ? ", predicted / measured" : "") << "\n";
  char row[512];
  std::snprintf(row, sizeof row, "  %-24s %17s %17s %11s %15s %14s\n", "unit", "forward",
                "backward", "all-gather", "wait", "reduce-scatter");
  out << row;
  std::vector<std::string> order = p.unit_order;
  for (const auto& [name, f] : p.units) {
    if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
  }
  for (const std::string& name : order) {
    const auto found = p.units.find(name);
    if (found == p.units.end()) continue;
    const predict::UnitFigures& f = found->second;
    const predict::UnitFigures* seen = nullptr;
    if (per_unit_measured) {
      const auto it = m->units.find(name);
      if (it != m->units.end()) seen = &it->second;
    }
    const auto pair = [&](double predicted, double measured_ms) {
      return seen ? ms(predicted) + " / " + ms(measured_ms) : ms(predicted);
    };
    std::snprintf(row, sizeof row, "  %-24s %17s %17s %11s %15s %14s\n", name.c_str(),
                  pair(f.forward_ms, seen ? seen->forward_ms : 0).c_str(),
                  pair(f.backward_ms, seen ? seen->backward_ms : 0).c_str(),
                  ms(f.all_gather_ms).c_str(), pair(f.wait_ms, seen ? seen->wait_ms : 0).c_str(),
                  ms(f.reduce_scatter_ms).c_str());
    out << row;
  }
  for (const std::string& note : p.model.notes) out << "note          " << note << "\n";
  return out.str();
}

ordered_json prediction_json(const predict::PlanPrediction& p) {
  const predict::Prediction& r = p.prediction;
  ordered_json j = ordered_json::object();
  j["profile"] = p.profile.name;
  j["microbatches"] = p.microbatches;
  j["microbatch_samples"] = p.model.microbatch_samples;
  j["optimizer"] = p.optimizer;
  j["compute_scale"] = p.model.compute_scale;
  j["step_ms"] = r.step_us / 1000;
  j["compute_ms"] = r.compute_us / 1000;
  j["exposed_comm_ms"] = r.exposed_comm_us / 1000;
  j["contention_ms"] = r.contention_us / 1000;
  ordered_json compute = ordered_json::object();
  for (const auto& [kind, t] : predict::compute_by_kind(r)) compute[kind] = t;
  j["compute_by_kind_ms"] = compute;
  ordered_json units = ordered_json::array();
  for (const auto& [name, f] : p.units) {
    units.push_back({{"unit", name},
                     {"forward_ms", f.forward_ms},
                     {"backward_ms", f.backward_ms},
                     {"all_gather_ms", f.all_gather_ms},
                     {"wait_ms", f.wait_ms},
                     {"reduce_scatter_ms", f.reduce_scatter_ms}});
  }
  j["units"] = units;
  ordered_json timeline = ordered_json::array();
  for (const predict::PredictedSpan& s : r.timeline) {
    timeline.push_back(
        {{"track", s.track}, {"name", s.name}, {"start_us", s.start_us}, {"end_us", s.end_us}});
  }
  j["timeline"] = timeline;
  j["notes"] = p.model.notes;
  if (p.measured) {
    ordered_json m = ordered_json::object();
    if (p.measured->step_ms) m["step_ms"] = *p.measured->step_ms;
    if (p.measured->exposed_comm_ms) m["exposed_comm_ms"] = *p.measured->exposed_comm_ms;
    m["steps"] = p.measured->steps;
    ordered_json mu = ordered_json::array();
    for (const auto& [name, f] : p.measured->units) {
      mu.push_back({{"unit", name},
                    {"forward_ms", f.forward_ms},
                    {"backward_ms", f.backward_ms},
                    {"wait_ms", f.wait_ms}});
    }
    m["units"] = mu;
    j["measured"] = m;
  }
  return j;
}

namespace {

predict::RankMemory memory_of(const schema::Plan& plan, const predict::PlanPrediction& p) {
  return predict::rank_memory(plan, p.optimizer, p.model.microbatch_samples);
}

std::string samples_text(int64_t n) {
  return std::to_string(n) + (n == 1 ? " sample" : " samples");
}

}  // namespace

std::string render_memory_text(const schema::Plan& plan, const predict::PlanPrediction& p,
                               const std::optional<int64_t>& budget) {
  const predict::RankMemory m = memory_of(plan, p);
  std::ostringstream out;
  out << "memory        " << format_bytes(m.total()) << " per rank: parameters "
      << format_bytes(m.parameters) << ", gradients " << format_bytes(m.gradients)
      << ", optimizer state " << format_bytes(m.optimizer_state) << " (" << p.optimizer
      << "), gathered slots " << format_bytes(m.slots) << ", activations ";
  if (m.activations) {
    out << format_bytes(*m.activations) << " (a microbatch of "
        << samples_text(p.model.microbatch_samples) << ")\n";
  } else {
    out << "not measured (plan with --trace-input to count them)\n";
  }
  if (!budget) return out.str();
  const predict::MemoryFit fit = predict::fit_memory(plan, m, *budget, p.model.microbatch_samples);
  out << "budget        " << format_bytes(*budget) << ": ";
  if (fit.over <= 0) {
    out << "fits, " << format_bytes(-fit.over) << " to spare"
        << (m.activations ? "" : " before activations") << "\n";
    return out.str();
  }
  out << "does not fit, " << format_bytes(fit.over) << " over; the largest term is " << fit.largest
      << "\n";
  if (fit.fits_unreplicated) {
    out << "to fit        shard over all " << plan.mesh.world_size
        << " ranks (--replicate 1): the sharded state becomes "
        << format_bytes(m.sharded() * plan.mesh.shard_size / plan.mesh.world_size) << "\n";
  }
  if (fit.shard_size) {
    const int64_t world = *fit.shard_size * plan.mesh.replicate_size;
    out << "to fit        more ranks: sharded over " << *fit.shard_size << " (--world-size "
        << world << (plan.mesh.replicate_size > 1 ? ", the same --replicate" : "")
        << ") parameters, gradients and optimizer state take "
        << format_bytes(m.sharded() * plan.mesh.shard_size / *fit.shard_size) << " instead of "
        << format_bytes(m.sharded()) << "\n";
  } else {
    out << "to fit        more ranks cannot: the gathered slots and activations alone take "
        << format_bytes(m.unshardable()) << "\n";
  }
  if (fit.uncheckpointed_units > 0) {
    out << "to fit        checkpointing the " << fit.uncheckpointed_units << " unit"
        << (fit.uncheckpointed_units == 1 ? "" : "s")
        << " not checkpointed (--checkpoint) frees at most "
        << format_bytes(fit.checkpoint_frees_at_most) << " of their saved activations"
        << (fit.checkpointing_may_fit ? ", which may be enough" : ", not enough on its own")
        << " (they keep their inputs: plan again with --trace-input to count them)\n";
  } else if (m.activations) {
    out << "to fit        checkpointing cannot: every unit is checkpointed already\n";
  }
  if (fit.microbatch_samples) {
    out << "to fit        a microbatch of " << samples_text(*fit.microbatch_samples)
        << " (--microbatch-size " << *fit.microbatch_samples
        << "; more --microbatches keep the batch): the activations scale with it\n";
  }
  return out.str();
}

ordered_json memory_json(const schema::Plan& plan, const predict::PlanPrediction& p,
                         const std::optional<int64_t>& budget) {
  const predict::RankMemory m = memory_of(plan, p);
  ordered_json j = ordered_json::object();
  j["total_bytes"] = m.total();
  j["parameter_bytes"] = m.parameters;
  j["gradient_bytes"] = m.gradients;
  j["optimizer_state_bytes"] = m.optimizer_state;
  j["slot_bytes"] = m.slots;
  j["activation_bytes"] = m.activations ? ordered_json(*m.activations) : ordered_json(nullptr);
  if (!budget) return j;
  const predict::MemoryFit fit = predict::fit_memory(plan, m, *budget, p.model.microbatch_samples);
  ordered_json b = ordered_json::object();
  b["budget_bytes"] = fit.budget;
  b["fits"] = fit.over <= 0;
  b["over_bytes"] = fit.over;
  b["largest_term"] = fit.largest;
  if (fit.over > 0) {
    b["fits_unreplicated"] = fit.fits_unreplicated;
    b["shard_size"] = fit.shard_size ? ordered_json(*fit.shard_size) : ordered_json(nullptr);
    b["uncheckpointed_units"] = fit.uncheckpointed_units;
    b["checkpoint_frees_at_most_bytes"] = fit.checkpoint_frees_at_most;
    b["microbatch_samples"] =
        fit.microbatch_samples ? ordered_json(*fit.microbatch_samples) : ordered_json(nullptr);
  }
  j["budget"] = b;
  return j;
}

}  // namespace mfsdp::cli
