#include "search/plan_search.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "planner/sharding_scope.h"
#include "planner/unit_selector.h"
#include "predict/cost_model.h"
#include "schema/error.h"
#include "search/unit_choices.h"

namespace mfsdp::search {
namespace {

bool covers_whole_model(const schema::Plan& plan) {
  return std::none_of(plan.diagnostics.begin(), plan.diagnostics.end(),
                      [](const schema::Diagnostic& d) { return d.code == "ownership.unmanaged"; });
}

schema::Plan plan_of(const SearchInput& in, const UnitChoice& units,
                     const std::vector<std::optional<bool>>& reshard, const schema::Mesh& mesh,
                     const schema::Policy& policy, const planner::TracedRun* trace) {
  planner::ShardedModel model = *in.model;  // a fresh copy: its units are this plan's
  planner::ShardingScope scope(model, mesh, policy);
  for (size_t u = 0; u < units.modules.size(); ++u) {
    planner::UnitOptions options;
    options.checkpoint = units.checkpoint[u];
    if (u < reshard.size()) options.reshard_after_forward = reshard[u];
    scope.fully_shard(planner::module_paths(model.ir(), units.modules[u]), options);
  }
  if (trace) scope.use_trace(*trace);
  schema::Plan plan = scope.finalize();
  plan.training = in.training;
  return plan;
}

// Whether the units can be planned: merged modules must run one after another.
bool can_plan(const SearchInput& in, const UnitChoice& units) {
  const bool merged = std::any_of(units.modules.begin(), units.modules.end(),
                                  [](const std::vector<int>& unit) { return unit.size() > 1; });
  if (!merged) return true;
  try {
    plan_of(in, units, {}, in.mesh, in.policy, nullptr);
    return true;
  } catch (const Error& e) {
    if (e.code() != ExitCode::kPlanning) throw;
    return false;
  }
}

// How many units, counted from the start of backward, a plan keeps gathered after forward:
// 0 (backward's first unit is kept anyway), 2, 3, 5, 9, ... and all of them.
std::vector<int> keep_counts(int gathered) {
  std::vector<int> out = {0};
  for (int k = 2; k < gathered; k = 2 * k - 1) out.push_back(k);
  if (gathered > 1) out.push_back(gathered);
  return out;
}

// Per unit of `units`, false for the first `k` of `plan`'s backward order, else unset.
std::vector<std::optional<bool>> keep_first_in_backward(const SearchInput& in,
                                                        const UnitChoice& units,
                                                        const schema::Plan& plan, int k) {
  std::vector<std::optional<bool>> out(units.modules.size());
  for (int i = 0; i < k && i < static_cast<int>(plan.backward_order.size()); ++i) {
    for (size_t u = 0; u < units.modules.size(); ++u) {
      if (planner::unit_name(in.model->ir(), units.modules[u]) == plan.backward_order[i])
        out[u] = false;
    }
  }
  return out;
}

int64_t collective_count(const schema::Plan& plan) {
  int64_t n = 0;
  for (const schema::ScheduleEntry& e : plan.schedule) {
    n += static_cast<int64_t>(e.all_gather.size() + e.reduce_scatter.size());
  }
  return n;
}

}  // namespace

std::string Candidate::label() const {
  std::string keep = "reshard";
  if (kept == gathered) {
    keep = "keep";
  } else if (kept > 1) {
    keep = "keep " + std::to_string(kept) + " of " + std::to_string(gathered);
  }
  return units + ", prefetch " + std::to_string(policy.forward_prefetch) + ", " + keep +
         (policy.unified_stream ? ", 1 stream" : ", 2 streams");
}

namespace {

// The samples a meta-traced plan's activations were counted for: the traced batch.
int64_t traced_samples(const schema::Plan& plan) {
  return plan.trace ? predict::traced_batch(*plan.trace) : 1;
}

}  // namespace

SearchResult search_plans(const SearchInput& in) {
  SearchResult result;
  // A meta trace weighs activations (so checkpointing and merging are choices) but times
  // nothing: its plans are predicted at the profile's compute rates when it has them, else
  // ranked by memory and collectives, as without a trace.
  const bool traced = !in.trace_inputs.empty();
  result.predicted = traced && (in.trace_device == planner::TraceDevice::kCpu ||
                                (in.profile && in.profile->compute.rates));
  result.activations = traced;
  int blocks = -1;
  const std::vector<UnitChoice> choices =
      unit_choices(in.model->ir(), in.yours, traced, result.predicted, blocks);
  const std::string optimizer = predict::predicted_optimizer(in.training, in.predict);
  std::map<size_t, planner::TracedRun> traces;  // by choice
  const auto trace_of = [&](size_t c) -> const planner::TracedRun* {
    const auto it = traces.find(c);
    return it == traces.end() ? nullptr : &it->second;
  };
  const auto consider = [&](size_t c, const schema::Policy& policy,
                            const std::vector<std::optional<bool>>& reshard) {
    const UnitChoice& units = choices[c];
    Candidate candidate;
    candidate.units = units.name;
    candidate.choice = c;
    candidate.policy = policy;
    candidate.reshard_after_forward = reshard;
    candidate.plan = plan_of(in, units, reshard, in.mesh, policy, trace_of(c));
    if (c == 0 && in.check_yours) in.check_yours(candidate.plan);
    if (!covers_whole_model(candidate.plan)) return false;  // not a plan mfsdp run can train
    for (const schema::Unit& u : candidate.plan.units) {
      if (u.call_count > 0) ++candidate.gathered;
      if (u.kept_after_forward) ++candidate.kept;
    }
    candidate.collectives = collective_count(candidate.plan);
    if (result.predicted) {
      const predict::PlanPrediction p =
          predict::predict_plan(candidate.plan, *in.profile, in.predict);
      candidate.step_ms = p.prediction.step_us / 1000;
      candidate.exposed_ms = p.prediction.exposed_comm_us / 1000;
      candidate.memory_bytes =
          predict::rank_memory_bytes(candidate.plan, p.optimizer, p.model.microbatch_samples)
              .value_or(0);
    } else if (traced) {
      candidate.memory_bytes =
          predict::rank_memory_bytes(candidate.plan, optimizer, traced_samples(candidate.plan))
              .value_or(0);
    } else {
      candidate.memory_bytes = predict::rank_state_bytes(candidate.plan, optimizer);
    }
    candidate.fits = !in.memory_budget || candidate.memory_bytes <= *in.memory_budget;
    const bool fsdp2 = static_cast<int>(c) == blocks && policy.forward_prefetch == 1 &&
                       policy.backward_prefetch == 1 && candidate.kept <= 1 &&
                       !policy.unified_stream;
    // A choice that changes nothing for these units (prefetch with one unit) is listed once.
    const auto same =
        std::find_if(result.candidates.begin(), result.candidates.end(), [&](const Candidate& o) {
          return o.units == candidate.units && o.step_ms == candidate.step_ms &&
                 o.memory_bytes == candidate.memory_bytes &&
                 o.collectives == candidate.collectives && o.kept == candidate.kept;
        });
    const int at = same == result.candidates.end()
                       ? static_cast<int>(result.candidates.size())
                       : static_cast<int>(same - result.candidates.begin());
    if (fsdp2 && result.fsdp2_default < 0) result.fsdp2_default = at;
    if (same == result.candidates.end()) result.candidates.push_back(std::move(candidate));
    return true;
  };

  for (size_t c = 0; c < choices.size(); ++c) {
    const UnitChoice& units = choices[c];
    // Merged blocks the model does not run one after another cannot be planned: not a choice.
    if (c != 0 && !can_plan(in, units)) continue;
    if (traced) {
      std::vector<std::vector<std::string>> paths;
      for (const std::vector<int>& unit : units.modules) {
        paths.push_back(planner::module_paths(in.model->ir(), unit));
      }
      traces.emplace(c, planner::trace_unit_modules(
                            in.model_path, paths, in.trace_inputs, in.policy.param_dtype,
                            units.checkpoint, in.trace_repeats, in.trace_device, in.attention));
    }
    if (c == 0 && !consider(0, in.policy, units.reshard_after_forward)) break;
    // The backward order, to keep its first units gathered.
    schema::Policy resharding = in.policy;
    resharding.reshard_after_forward = true;
    const schema::Plan order = plan_of(in, units, {}, in.mesh, resharding, trace_of(c));
    int gathered = 0;
    for (const schema::Unit& u : order.units) gathered += u.call_count > 0 ? 1 : 0;
    // Without a trace nothing tells prefetch or streams apart: they stay yours.
    const std::vector<int64_t> prefetches = result.predicted
                                                ? std::vector<int64_t>{0, 1, 2}
                                                : std::vector<int64_t>{in.policy.forward_prefetch};
    const std::vector<bool> streams = result.predicted
                                          ? std::vector<bool>{false, true}
                                          : std::vector<bool>{in.policy.unified_stream};
    for (int64_t prefetch : prefetches) {
      for (bool unified : streams) {
        for (int keep : keep_counts(gathered)) {
          schema::Policy p = in.policy;
          if (result.predicted) p.forward_prefetch = p.backward_prefetch = prefetch;
          p.unified_stream = unified;
          p.reshard_after_forward = keep < gathered;
          consider(c, p, keep_first_in_backward(in, units, order, keep < gathered ? keep : 0));
        }
      }
    }
  }

  std::vector<Candidate>& all = result.candidates;
  // Faster with a prediction; with fewer collectives without one.
  const auto cost = [&](const Candidate& c) {
    return result.predicted ? c.step_ms : static_cast<double>(c.collectives);
  };
  // Without a prediction, a plan of one unit comes after every plan of more: its all-gather
  // has no compute to hide behind, whatever the machine.
  const auto rank_cost = [&](const Candidate& c) {
    return cost(c) + (!result.predicted && c.gathered <= 1 ? 1e15 : 0.0);
  };
  for (Candidate& c : all) {
    c.pareto = std::none_of(all.begin(), all.end(), [&](const Candidate& o) {
      return (cost(o) < cost(c) && o.memory_bytes <= c.memory_bytes) ||
             (cost(o) <= cost(c) && o.memory_bytes < c.memory_bytes);
    });
  }
  double best = -1;
  for (const Candidate& c : all) {
    if (c.fits && (best < 0 || rank_cost(c) < best)) best = rank_cost(c);
  }
  const double slack = result.predicted ? 1.01 : 1.0;
  for (size_t i = 0; i < all.size(); ++i) {
    const Candidate& c = all[i];
    if (!c.fits || rank_cost(c) > best * slack) continue;
    if (result.chosen < 0 || c.memory_bytes < all[result.chosen].memory_bytes) {
      result.chosen = static_cast<int>(i);
    }
  }

  const int base = result.chosen >= 0 ? result.chosen : result.yours;
  if (!in.sweep_worlds.empty() && !all.empty()) {
    const Candidate& c = all[base];
    for (int64_t world : in.sweep_worlds) {
      schema::Mesh mesh = in.mesh;
      if (world % mesh.replicate_size != 0) {
        fail(ExitCode::kUsage, "--sweep-world " + std::to_string(world) +
                                   " is not a multiple of --replicate " +
                                   std::to_string(mesh.replicate_size));
      }
      mesh.world_size = world;
      mesh.shard_size = world / mesh.replicate_size;
      const schema::Plan plan = plan_of(in, choices[c.choice], c.reshard_after_forward, mesh,
                                        c.policy, trace_of(c.choice));
      SearchResult::WorldRow row{world, 0, predict::rank_state_bytes(plan, optimizer)};
      if (traced && !result.predicted) {
        row.memory_bytes =
            predict::rank_memory_bytes(plan, optimizer, traced_samples(plan)).value_or(0);
      }
      if (result.predicted) {
        const predict::PlanPrediction p = predict::predict_plan(plan, *in.profile, in.predict);
        row.step_ms = p.prediction.step_us / 1000;
        row.memory_bytes =
            predict::rank_memory_bytes(plan, p.optimizer, p.model.microbatch_samples).value_or(0);
      }
      result.worlds.push_back(row);
    }
  }
  return result;
}

}  // namespace mfsdp::search
