// memory: the peak against the schedule and the budget, sharded totals, and the slots the
// executor allocates once and reuses for units whose lifetimes do not overlap.

#include <algorithm>

#include "schema/check_context.h"
#include "schema/plan_rules.h"

namespace mfsdp::schema::check {
namespace {

std::string describe(const Lifetime& lifetime) {
  return "schedule[" + std::to_string(lifetime.first) + ".." + std::to_string(lifetime.last) + "]";
}

// The first pair of intervals, one per unit, that share an entry; closed intervals because a
// unit all-gathered in the entry another is resharded in overlaps it within that entry.
std::optional<std::pair<Lifetime, Lifetime>> first_overlap(const std::vector<Lifetime>& a,
                                                           const std::vector<Lifetime>& b) {
  for (const Lifetime& x : a) {
    for (const Lifetime& y : b) {
      if (x.first <= y.last && y.first <= x.last) return std::pair{x, y};
    }
  }
  return std::nullopt;
}

void check_peak(Context& context) {
  const Plan& plan = context.plan;
  const Memory& memory = plan.memory;
  int64_t peak = 0;
  std::string peak_at;
  for (size_t e = 0; e < plan.schedule.size(); ++e) {
    if (e == 0 || plan.schedule[e].unsharded_bytes > peak) {
      peak = plan.schedule[e].unsharded_bytes;
      peak_at = schedule_point_name(plan.schedule[e]);
    }
  }
  if (memory.peak_unsharded_bytes != peak) {
    context.report("memory.peak_unsharded_bytes",
                   "is " + std::to_string(memory.peak_unsharded_bytes) + ", expected " +
                       std::to_string(peak) + " (the largest schedule[].unsharded_bytes)");
  }
  if (memory.peak_at != peak_at) {
    context.report("memory.peak_at", "is " + quote(memory.peak_at) + ", expected " +
                                         quote(peak_at) + " (the first entry at the peak)");
  }
  const int64_t budget = plan.policy.resident_budget_bytes;
  if (budget > 0 && memory.peak_unsharded_bytes > budget) {
    context.report("memory.peak_unsharded_bytes", std::to_string(memory.peak_unsharded_bytes) +
                                                      " exceeds policy.resident_budget_bytes " +
                                                      std::to_string(budget));
  }
}

void check_sharded_totals(Context& context) {
  const Plan& plan = context.plan;
  Wide params = 0;
  Wide grads = 0;
  const std::optional<int64_t> reduce_size = context.main_grad_size();
  for (const Unit& unit : plan.units) {
    params += unit.sharded_bytes;
    for (const Group& group : unit.groups) {
      if (reduce_size && has_gradient(group)) grads += Wide{group.shard_numel} * *reduce_size;
    }
  }
  if (params != plan.memory.sharded_param_bytes) {
    context.report("memory.sharded_param_bytes",
                   "is " + std::to_string(plan.memory.sharded_param_bytes) + ", expected " +
                       to_string(params) + " (Σ units' sharded_bytes)");
  }
  if (reduce_size && context.group_dtypes_known() && grads != plan.memory.sharded_grad_bytes) {
    context.report("memory.sharded_grad_bytes",
                   "is " + std::to_string(plan.memory.sharded_grad_bytes) + ", expected " +
                       to_string(grads) +
                       " (Σ gradient groups' shard_numel × main gradient dtype size)");
  }
}

void check_slots(Context& context, const Lifetimes& lifetimes) {
  const Plan& plan = context.plan;
  const std::vector<Slot>& slots = plan.memory.slots;
  const std::vector<Lifetime> never;
  const auto lifetimes_of = [&](const std::string& name) -> const std::vector<Lifetime>& {
    const auto it = lifetimes.find(name);
    return it == lifetimes.end() ? never : it->second;
  };

  std::map<std::string, std::string> slot_of;
  Wide total = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const std::string path = at("memory.slots", i);
    const Slot& slot = slots[i];
    if (slot.index != static_cast<int64_t>(i)) {
      context.report(path + ".index",
                     "is " + std::to_string(slot.index) + ", expected " + std::to_string(i));
    }
    total += slot.bytes;
    const Unit* largest = nullptr;
    std::vector<const Unit*> members;
    for (size_t j = 0; j < slot.units.size(); ++j) {
      const std::string unit_path = at(path + ".units", j);
      const Unit* unit = context.unit(slot.units[j]);
      if (unit == nullptr) {
        context.report(unit_path, quote(slot.units[j]) + " is not a unit");
        continue;
      }
      if (const auto [it, fresh] = slot_of.emplace(unit->name, unit_path); !fresh) {
        context.report(unit_path, quote(unit->name) + " is already in " + it->second);
        continue;
      }
      for (const Unit* other : members) {
        if (const auto overlap =
                first_overlap(lifetimes_of(unit->name), lifetimes_of(other->name))) {
          context.report(unit_path, quote(unit->name) + " is live during " +
                                        describe(overlap->first) + ", as is " + quote(other->name) +
                                        " (" + describe(overlap->second) + ") in the same slot");
          break;
        }
      }
      members.push_back(unit);
      if (largest == nullptr || unit->unsharded_bytes > largest->unsharded_bytes) largest = unit;
    }
    if (largest != nullptr && slot.bytes < largest->unsharded_bytes) {
      context.report(path + ".bytes", "is " + std::to_string(slot.bytes) + ", smaller than the " +
                                          std::to_string(largest->unsharded_bytes) +
                                          " unsharded bytes of " + quote(largest->name));
    }
  }
  if (total != plan.memory.slot_bytes) {
    context.report("memory.slot_bytes", "is " + std::to_string(plan.memory.slot_bytes) +
                                            ", expected " + to_string(total) + " (Σ slots' bytes)");
  }
  for (const Unit& unit : plan.units) {
    if (context.unit(unit.name) == &unit && lifetimes.count(unit.name) &&
        !slot_of.count(unit.name)) {
      context.report("memory.slots", quote(unit.name) + " is all-gathered but has no slot");
    }
  }
}

// The traced activations: measured, so only their consistency can be checked: one entry per
// unit of forward_order in that order, and the combined peak as the sum it is defined as.
void check_activations(Context& context) {
  const Plan& plan = context.plan;
  if (!plan.memory.activations) return;
  const Activations& a = *plan.memory.activations;
  const std::string path = "memory.activations";
  if (!plan.trace) {
    context.report(path,
                   "is present but the plan has no trace section; activations are "
                   "measured by mfsdp plan --trace-input");
  }
  if (a.loss != "cross_entropy" && a.loss != "sum") {
    context.report(path + ".loss", "is " + quote(a.loss) + ", expected 'cross_entropy' or 'sum'");
  }
  std::vector<std::string> names;
  for (const UnitActivations& unit : a.units) names.push_back(unit.unit);
  if (names != plan.forward_order) {
    context.report(path + ".units", "lists " + quote_list(names) + ", expected forward_order " +
                                        quote_list(plan.forward_order));
  }
  const Wide combined = Wide{a.peak_bytes} + plan.memory.sharded_param_bytes +
                        plan.memory.sharded_grad_bytes + plan.memory.slot_bytes;
  if (combined != a.combined_peak_bytes) {
    context.report(path + ".combined_peak_bytes",
                   "is " + std::to_string(a.combined_peak_bytes) + ", expected " +
                       to_string(combined) +
                       " (peak_bytes + sharded_param_bytes + sharded_grad_bytes + slot_bytes)");
  }
}

}  // namespace

void check_memory(Context& context, const Lifetimes& lifetimes) {
  check_peak(context);
  check_sharded_totals(context);
  check_slots(context, lifetimes);
  check_activations(context);
}

}  // namespace mfsdp::schema::check
