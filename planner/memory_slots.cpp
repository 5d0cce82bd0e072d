// assign_slots: the executor allocates a few static buffers once and every unsharded unit lives
// in one of them. A unit keeps one slot for all its lifetimes (forward and backward), so two
// units share a slot only if they are never live at the same time.
#include <map>

#include "planner/passes.h"
#include "schema/plan_rules.h"

namespace mfsdp::planner {
namespace {

struct Interval {
  size_t first = 0;  // schedule entry of the all-gather
  size_t last = 0;   // schedule entry of the reshard
};

// `busy` holds disjoint closed intervals of one slot, keyed by first entry.
bool overlaps(const std::map<size_t, size_t>& busy, const std::vector<Interval>& lifetimes) {
  for (const auto& x : lifetimes) {
    auto it = busy.upper_bound(x.last);
    if (it != busy.begin() && std::prev(it)->second >= x.first) return true;
  }
  return false;
}

}  // namespace

void assign_slots(PlanIR& ir) {
  std::map<std::string, int> unit_index;
  for (size_t u = 0; u < ir.units.size(); ++u) unit_index[ir.units[u].name] = u;
  std::vector<std::vector<Interval>> lifetimes(ir.units.size());
  std::vector<int> first_gather;  // units in order of their first all-gather
  for (size_t i = 0; i < ir.schedule.size(); ++i) {
    for (const auto& name : ir.schedule[i].all_gather) {
      const int u = unit_index.at(name);
      if (lifetimes[u].empty()) first_gather.push_back(u);
      lifetimes[u].push_back({i, ir.schedule.size()});
    }
    for (const auto& name : ir.schedule[i].reshard) lifetimes[unit_index.at(name)].back().last = i;
  }

  struct SlotState {
    int64_t bytes = 0;
    std::vector<int> units;
    std::map<size_t, size_t> busy;
  };
  std::vector<SlotState> slots;
  for (int u : first_gather) {
    const int64_t need = ir.units[u].unsharded_bytes;
    int best = -1;
    for (size_t s = 0; s < slots.size(); ++s) {
      if (overlaps(slots[s].busy, lifetimes[u])) continue;
      // Prefer the smallest slot that fits; otherwise grow the largest free one.
      const bool fits = slots[s].bytes >= need;
      if (best == -1) {
        best = s;
        continue;
      }
      const bool best_fits = slots[best].bytes >= need;
      if (fits && (!best_fits || slots[s].bytes < slots[best].bytes)) best = s;
      if (!fits && !best_fits && slots[s].bytes > slots[best].bytes) best = s;
    }
    if (best == -1) {
      best = static_cast<int>(slots.size());
      slots.emplace_back();
    }
    SlotState& slot = slots[best];
    slot.bytes = std::max(slot.bytes, need);
    slot.units.push_back(u);
    for (const auto& x : lifetimes[u]) slot.busy.emplace(x.first, x.last);
  }

  ir.memory.slots.clear();
  ir.memory.slot_bytes = 0;
  for (size_t s = 0; s < slots.size(); ++s) {
    schema::Slot out;
    out.index = static_cast<int64_t>(s);
    out.bytes = slots[s].bytes;
    for (int u : slots[s].units) out.units.push_back(ir.units[u].name);
    ir.memory.slot_bytes = schema::add_sizes(ir.memory.slot_bytes, out.bytes, "memory.slot_bytes");
    ir.memory.slots.push_back(std::move(out));
  }
}

}  // namespace mfsdp::planner
