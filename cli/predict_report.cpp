#include "cli/predict_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "schema/error.h"
#include "schema/json_text.h"

namespace mfsdp::cli {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string ms(double value, int decimals = 2) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  if (n == 0) return 0;
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ExitCode::kUsage, std::string(what) + " " + path + ": cannot read it");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The per-rank microbatch the plan's training defaults describe, if they do evenly.
std::optional<int64_t> training_microbatch(const schema::Plan& plan, int64_t microbatches) {
  if (!plan.training || !plan.training->global_batch) return std::nullopt;
  const int64_t per_step = plan.mesh.world_size * microbatches;
  const int64_t global = *plan.training->global_batch;
  if (per_step < 1 || global % per_step != 0) return std::nullopt;
  return global / per_step;
}

std::map<std::string, UnitFigures> unit_figures(const schema::Prediction& p) {
  std::map<std::string, UnitFigures> units;
  for (const schema::UnitWindow& w : p.windows) {
    UnitFigures& u = units[w.unit];
    (w.phase == "forward" ? u.forward_ms : u.backward_ms) += (w.end_us - w.start_us) / 1000;
  }
  for (const schema::PredictedSpan& s : p.timeline) {
    if (s.unit.empty()) continue;
    const double d = (s.end_us - s.start_us) / 1000;
    if (s.kind == "all_gather") units[s.unit].all_gather_ms += d;
    if (s.kind == "wait_all_gather") units[s.unit].wait_ms += d;
    if (s.kind == "reduce_scatter" || s.kind == "all_reduce") units[s.unit].reduce_scatter_ms += d;
  }
  return units;
}

// Compute's own time by kind, in ms.
std::map<std::string, double> compute_by_kind(const schema::Prediction& p) {
  std::map<std::string, double> by;
  for (const schema::PredictedSpan& s : p.timeline) {
    if (s.track != "compute") continue;
    by[s.kind] += (s.end_us - s.start_us) / 1000;
  }
  return by;
}

std::string error_text(double predicted, double measured) {
  if (measured <= 0) return "";
  const double e = 100 * (predicted - measured) / measured;
  return (e >= 0 ? "+" : "") + ms(e, 1) + " %";
}

}  // namespace

Measured read_run_metrics(const std::string& path) {
  const std::string text = read_file(path, "--metrics");
  std::map<int64_t, double> slowest;               // by step
  std::map<int64_t, std::vector<double>> exposed;  // by step
  std::map<int64_t, bool> ranks;
  std::istringstream lines(text);
  std::string line;
  size_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    const std::string error = schema::parse_json_text(line, j);
    if (!error.empty()) {
      fail(ExitCode::kUsage,
           path + ":" + std::to_string(number) + ": not a metrics line: " + error);
    }
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    const int64_t step = j["step"].get<int64_t>();
    if (j.contains("rank") && j["rank"].is_number_integer()) ranks[j["rank"].get<int64_t>()] = true;
    if (j.contains("step_ms") && j["step_ms"].is_number()) {
      slowest[step] = std::max(slowest[step], j["step_ms"].get<double>());
    }
    if (j.contains("exposed_comm_ms") && j["exposed_comm_ms"].is_number()) {
      exposed[step].push_back(j["exposed_comm_ms"].get<double>());
    }
  }
  if (slowest.empty()) {
    fail(ExitCode::kUsage, path +
                               ": no step lines with step_ms; give the file a run's --metrics "
                               "wrote (docs/run.md#metrics)");
  }
  const int64_t first = slowest.begin()->first;
  std::vector<double> steps, waits;
  for (const auto& [step, time] : slowest) {
    if (step == first && slowest.size() > 1) continue;  // the first step warms up
    steps.push_back(time);
    for (double e : exposed[step]) waits.push_back(e);
  }
  Measured m;
  m.step_ms = median(steps);
  if (!waits.empty()) m.exposed_comm_ms = median(waits);
  m.steps = static_cast<int64_t>(steps.size());
  m.ranks = static_cast<int64_t>(ranks.size());
  return m;
}

void read_run_trace(const std::string& path, Measured& into) {
  json doc;
  const std::string error = schema::parse_json_text(read_file(path, "--run-trace"), doc);
  if (!error.empty()) fail(ExitCode::kUsage, path + ": not valid JSON: " + error);
  const json& events = doc.is_object() && doc.contains("traceEvents") ? doc["traceEvents"] : doc;
  if (!events.is_array()) {
    fail(ExitCode::kUsage, path +
                               ": not a Chrome trace (no traceEvents); give the file a run's "
                               "--trace wrote (docs/run.md)");
  }
  std::map<int64_t, int64_t> steps;  // by rank (pid)
  std::map<std::string, UnitFigures> sums;
  const auto starts = [](const std::string& s, const std::string& prefix) {
    return s.compare(0, prefix.size(), prefix) == 0;
  };
  for (const json& e : events) {
    // Spans only, with the fields a run's trace gives them; anything else is not ours.
    if (!e.is_object() || !e.contains("ph") || e["ph"] != "X" || !e.contains("dur") ||
        !e["dur"].is_number() || !e.contains("name") || !e["name"].is_string()) {
      continue;
    }
    const std::string name = e["name"].get<std::string>();
    const double d = e["dur"].get<double>() / 1000;
    const int64_t pid =
        e.contains("pid") && e["pid"].is_number_integer() ? e["pid"].get<int64_t>() : 0;
    if (starts(name, "step ")) ++steps[pid];
    if (starts(name, "forward ")) sums[name.substr(8)].forward_ms += d;
    if (starts(name, "backward ")) sums[name.substr(9)].backward_ms += d;
    if (starts(name, "wait for all-gather of ")) sums[name.substr(23)].wait_ms += d;
  }
  int64_t rank_steps = 0;
  for (const auto& [rank, n] : steps) rank_steps += n;
  if (rank_steps == 0) {
    fail(ExitCode::kUsage, path + ": no `step` spans; give the file a run's --trace wrote");
  }
  for (auto& [unit, f] : sums) {
    f.forward_ms /= static_cast<double>(rank_steps);
    f.backward_ms /= static_cast<double>(rank_steps);
    f.wait_ms /= static_cast<double>(rank_steps);
  }
  into.units = sums;
  into.traced_steps = rank_steps / static_cast<int64_t>(steps.size());
}

PlanPrediction predict_plan(const schema::Plan& plan, const PredictRequest& request) {
  return predict_plan(plan, schema::load_profile(request.profile), request);
}

PlanPrediction predict_plan(const schema::Plan& plan, const schema::Profile& profile,
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
  schema::PredictOptions options;
  options.compute_scale = request.compute_scale;
  options.optimizer = p.optimizer;
  options.microbatch_samples =
      request.microbatch_size ? request.microbatch_size : training_microbatch(plan, p.microbatches);
  p.model = schema::step_costs(plan, p.profile, options);
  p.prediction = schema::simulate_step(plan, p.model.costs, p.microbatches);
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
  const schema::Memory& m = plan.memory;
  if (!m.activations) return std::nullopt;
  const double activations = static_cast<double>(m.activations->peak_bytes) *
                             static_cast<double>(microbatch_samples) /
                             static_cast<double>(std::max<int64_t>(1, m.activations->microbatch));
  return rank_state_bytes(plan, optimizer) + static_cast<int64_t>(std::llround(activations));
}

std::string predicted_optimizer(const std::optional<schema::Training>& training,
                                const PredictRequest& request) {
  if (request.optimizer) return *request.optimizer;
  return training && training->optimizer ? *training->optimizer : "adamw";
}

int64_t rank_state_bytes(const schema::Plan& plan, const std::string& optimizer) {
  const schema::Memory& m = plan.memory;
  const int64_t states = optimizer == "sgd" ? 1 : 2;
  return m.sharded_param_bytes + m.sharded_grad_bytes * (1 + states) + m.slot_bytes;
}

std::string render_prediction_text(const PlanPrediction& p, const std::string& plan_path) {
  std::ostringstream out;
  const schema::Prediction& r = p.prediction;
  out << "prediction    " << plan_path << " on profile '" << p.profile.name << "' ("
      << p.profile.backend << ", " << p.profile.device << ")\n";
  out << "              " << p.microbatches << " microbatch" << (p.microbatches == 1 ? "" : "es")
      << " of " << p.model.microbatch_samples << " sample"
      << (p.model.microbatch_samples == 1 ? "" : "s") << " per rank, " << p.optimizer << "\n";
  out << "step          " << ms(r.step_us / 1000) << " ms = compute " << ms(r.compute_us / 1000)
      << " + exposed communication " << ms(r.exposed_comm_us / 1000);
  if (r.contention_us > 0) out << " + contention " << ms(r.contention_us / 1000);
  out << " ms\n";
  const std::map<std::string, double> by = compute_by_kind(r);
  const auto part = [&](const char* kind) {
    const auto it = by.find(kind);
    return it == by.end() ? 0.0 : it->second;
  };
  out << "compute       forward " << ms(part("forward") + part("after_forward")) << ", loss "
      << ms(part("loss")) << ", backward " << ms(part("backward"));
  if (part("recompute") > 0) out << ", recompute " << ms(part("recompute"));
  out << ", optimizer " << ms(part("optimizer")) << " ms\n";
  // The critical path is compute's chain: its work and the waits that stretch it.
  std::vector<const schema::PredictedSpan*> waits;
  for (const schema::PredictedSpan& s : r.timeline) {
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
  const std::optional<Measured>& m = p.measured;
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
    const UnitFigures& f = found->second;
    const UnitFigures* seen = nullptr;
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

ordered_json prediction_json(const PlanPrediction& p) {
  const schema::Prediction& r = p.prediction;
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
  for (const auto& [kind, t] : compute_by_kind(r)) compute[kind] = t;
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
  for (const schema::PredictedSpan& s : r.timeline) {
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

}  // namespace mfsdp::cli
