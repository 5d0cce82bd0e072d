#include "cli/plan_search.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/byte_size.h"
#include "planner/sharding_scope.h"
#include "schema/error.h"

namespace mfsdp::cli {
namespace {

// Every policy tried for a set of units, the user's first; the rest keep the user's dtypes,
// alignment and resident budget.
std::vector<schema::Policy> policies(const schema::Policy& yours) {
  std::vector<schema::Policy> out = {yours};
  for (int64_t prefetch : {0, 1, 2}) {
    for (bool reshard : {true, false}) {
      for (bool unified : {false, true}) {
        schema::Policy p = yours;
        p.forward_prefetch = p.backward_prefetch = prefetch;
        p.reshard_after_forward = reshard;
        p.unified_stream = unified;
        const bool same = p.forward_prefetch == yours.forward_prefetch &&
                          p.backward_prefetch == yours.backward_prefetch &&
                          p.reshard_after_forward == yours.reshard_after_forward &&
                          p.unified_stream == yours.unified_stream;
        if (!same) out.push_back(p);
      }
    }
  }
  return out;
}

bool covers_whole_model(const schema::Plan& plan) {
  return std::none_of(plan.diagnostics.begin(), plan.diagnostics.end(),
                      [](const schema::Diagnostic& d) { return d.code == "ownership.unmanaged"; });
}

schema::Plan plan_of(const SearchInput& in, const UnitChoice& units, const schema::Mesh& mesh,
                     const schema::Policy& policy, const planner::TracedRun& trace) {
  planner::ShardedModel model = *in.model;  // a fresh copy: its units are this plan's
  planner::ShardingScope scope(model, mesh, policy);
  for (size_t u = 0; u < units.modules.size(); ++u) {
    scope.fully_shard(model.ir().modules[units.modules[u]].path, {units.checkpoint[u]});
  }
  scope.use_trace(trace);
  schema::Plan plan = scope.finalize();
  plan.training = in.training;
  return plan;
}

std::string ms_text(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f ms", ms);
  return text;
}

std::string percent_text(double now, double before) {
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f %%", before > 0 ? 100 * (now - before) / before : 0.0);
  return text;
}

}  // namespace

std::string Candidate::label() const {
  return units + ", prefetch " + std::to_string(policy.forward_prefetch) +
         (policy.reshard_after_forward ? ", reshard" : ", keep") +
         (policy.unified_stream ? ", 1 stream" : ", 2 streams");
}

SearchResult search_plans(const SearchInput& in) {
  SearchResult result;
  std::map<int, planner::TracedRun> traces;  // by UnitChoice index
  for (size_t c = 0; c < in.units.size(); ++c) {
    const UnitChoice& units = in.units[c];
    std::vector<std::string> paths;
    for (int m : units.modules) paths.push_back(in.model->ir().modules[m].path);
    traces.emplace(static_cast<int>(c),
                   planner::trace_units(in.model_path, paths, in.trace_inputs,
                                        in.policy.param_dtype, units.checkpoint, in.trace_repeats));
    for (const schema::Policy& policy : policies(in.policy)) {
      Candidate candidate;
      candidate.units = units.name;
      candidate.policy = policy;
      candidate.plan = plan_of(in, units, in.mesh, policy, traces.at(static_cast<int>(c)));
      if (c == 0 && in.check_yours) in.check_yours(candidate.plan);
      if (!covers_whole_model(candidate.plan)) break;  // not a plan mfsdp run can train
      const PlanPrediction p = predict_plan(candidate.plan, in.profile, in.predict);
      candidate.step_ms = p.prediction.step_us / 1000;
      candidate.exposed_ms = p.prediction.exposed_comm_us / 1000;
      const std::optional<int64_t> memory =
          rank_memory_bytes(candidate.plan, p.optimizer, p.model.microbatch_samples);
      candidate.memory_bytes = memory.value_or(0);
      candidate.fits = !in.memory_budget || candidate.memory_bytes <= *in.memory_budget;
      const bool same_as_tried =
          std::any_of(result.candidates.begin(), result.candidates.end(), [&](const Candidate& o) {
            return o.units == candidate.units && o.step_ms == candidate.step_ms &&
                   o.memory_bytes == candidate.memory_bytes;
          });
      const bool fsdp2 = static_cast<int>(c) == in.blocks && policy.forward_prefetch == 1 &&
                         policy.backward_prefetch == 1 && policy.reshard_after_forward &&
                         !policy.unified_stream;
      // A policy that changes nothing for these units (prefetch with one unit) is not listed
      // twice; the user's plan and the FSDP2-like default always are.
      if (same_as_tried && !fsdp2 && !result.candidates.empty()) continue;
      if (fsdp2 && result.fsdp2_default < 0) {
        result.fsdp2_default = static_cast<int>(result.candidates.size());
      }
      result.candidates.push_back(std::move(candidate));
    }
  }
  std::vector<Candidate>& all = result.candidates;
  for (Candidate& c : all) {
    c.pareto = std::none_of(all.begin(), all.end(), [&](const Candidate& o) {
      return (o.step_ms < c.step_ms && o.memory_bytes <= c.memory_bytes) ||
             (o.step_ms <= c.step_ms && o.memory_bytes < c.memory_bytes);
    });
  }
  double fastest = -1;
  for (const Candidate& c : all) {
    if (c.fits && (fastest < 0 || c.step_ms < fastest)) fastest = c.step_ms;
  }
  for (size_t i = 0; i < all.size(); ++i) {
    const Candidate& c = all[i];
    if (!c.fits || c.step_ms > fastest * 1.01) continue;
    if (result.chosen < 0 || c.memory_bytes < all[result.chosen].memory_bytes) {
      result.chosen = static_cast<int>(i);
    }
  }

  const int base = result.chosen >= 0 ? result.chosen : result.yours;
  if (!in.sweep_worlds.empty() && !all.empty()) {
    const Candidate& c = all[base];
    size_t choice = 0;
    while (choice + 1 < in.units.size() && in.units[choice].name != c.units) ++choice;
    for (int64_t world : in.sweep_worlds) {
      schema::Mesh mesh = in.mesh;
      if (world % mesh.replicate_size != 0) {
        fail(ExitCode::kUsage, "--sweep-world " + std::to_string(world) +
                                   " is not a multiple of --replicate " +
                                   std::to_string(mesh.replicate_size));
      }
      mesh.world_size = world;
      mesh.shard_size = world / mesh.replicate_size;
      const schema::Plan plan =
          plan_of(in, in.units[choice], mesh, c.policy, traces.at(static_cast<int>(choice)));
      const PlanPrediction p = predict_plan(plan, in.profile, in.predict);
      result.worlds.push_back(
          {world, p.prediction.step_us / 1000,
           rank_memory_bytes(plan, p.optimizer, p.model.microbatch_samples).value_or(0)});
    }
  }
  return result;
}

void print_sweep(std::ostream& out, const SearchResult& result,
                 const std::optional<int64_t>& budget) {
  std::vector<size_t> order(result.candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return result.candidates[a].memory_bytes < result.candidates[b].memory_bytes;
  });
  char row[256];
  std::snprintf(row, sizeof row, "  %-48s %12s %12s %12s  %s\n", "plan", "memory/rank", "step",
                "exposed", "");
  out << "candidates (* on the Pareto front: none both faster and smaller"
      << (budget ? "; - over the budget of " + format_bytes(*budget) : std::string()) << ")\n"
      << row;
  for (size_t i : order) {
    const Candidate& c = result.candidates[i];
    std::string marks = c.pareto ? "*" : "";
    if (!c.fits) marks += "-";
    if (static_cast<int>(i) == result.chosen) marks += " chosen";
    if (static_cast<int>(i) == result.yours) marks += " yours";
    if (static_cast<int>(i) == result.fsdp2_default) marks += " fsdp2-like";
    std::snprintf(row, sizeof row, "  %-48s %12s %12s %12s  %s\n", c.label().c_str(),
                  format_bytes(c.memory_bytes).c_str(), ms_text(c.step_ms).c_str(),
                  ms_text(c.exposed_ms).c_str(), marks.c_str());
    out << row;
  }
}

void print_worlds(std::ostream& out, const SearchResult& result) {
  if (result.worlds.empty()) return;
  out << "world sizes (the " << (result.chosen >= 0 ? "chosen" : "your")
      << " plan, the same microbatch per rank)\n";
  char row[128];
  std::snprintf(row, sizeof row, "  %8s %14s %12s\n", "world", "memory/rank", "step");
  out << row;
  for (const auto& w : result.worlds) {
    std::snprintf(row, sizeof row, "  %8lld %14s %12s\n", static_cast<long long>(w.world_size),
                  format_bytes(w.memory_bytes).c_str(), ms_text(w.step_ms).c_str());
    out << row;
  }
}

void print_choice(std::ostream& out, const SearchResult& result,
                  const std::optional<int64_t>& budget) {
  const auto& all = result.candidates;
  if (result.chosen < 0) return;
  const Candidate& c = all[result.chosen];
  out << "optimized: " << c.label() << ": predicted step " << ms_text(c.step_ms) << ", "
      << format_bytes(c.memory_bytes) << " per rank"
      << (budget ? " (budget " + format_bytes(*budget) + ")" : std::string()) << "\n";
  const Candidate& yours = all[result.yours];
  out << "  vs your plan (" << yours.label() << "): " << ms_text(yours.step_ms) << ", "
      << percent_text(c.step_ms, yours.step_ms) << (yours.fits ? "" : "; yours is over the budget")
      << "\n";
  if (result.fsdp2_default >= 0) {
    const Candidate& d = all[result.fsdp2_default];
    out << "  vs an FSDP2-like default (" << d.label() << "): " << ms_text(d.step_ms) << ", "
        << percent_text(c.step_ms, d.step_ms) << "\n";
  }
}

}  // namespace mfsdp::cli
