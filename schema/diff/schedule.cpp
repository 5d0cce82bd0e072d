// Orders and the schedule: roots, forward and backward order moves, where each all-gather is
// issued (prefetch), and the schedule entries' other actions.
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>

#include "schema/diff/differ.h"

namespace mfsdp::schema::diff {

void Differ::compare_order(const std::string& name, const std::vector<std::string>& old_order,
                           const std::vector<std::string>& new_order) {
  if (!shown(name)) return;
  const std::vector<std::string> before = mapped(old_order);
  std::map<std::string, size_t> new_position;
  for (size_t i = 0; i < new_order.size(); ++i) new_position.emplace(new_order[i], i);
  std::map<std::string, size_t> old_position;
  for (size_t i = 0; i < before.size(); ++i) old_position.emplace(before[i], i);
  std::vector<size_t> common;  // new positions of the old order's units, in old order
  std::vector<size_t> common_old;
  for (size_t i = 0; i < before.size(); ++i) {
    const auto it = new_position.find(before[i]);
    if (it != new_position.end() && old_position.at(before[i]) == i) {
      common.push_back(it->second);
      common_old.push_back(i);
    }
  }
  const std::set<size_t> kept = longest_increasing(common);
  std::vector<OrderMove> moves;
  for (size_t k = 0; k < common.size(); ++k) {
    if (kept.count(k)) continue;
    moves.push_back({name, new_order[common[k]], static_cast<int64_t>(common_old[k] + 1),
                     static_cast<int64_t>(common[k] + 1)});
  }
  for (size_t i = 0; i < before.size(); ++i) {
    if (!new_position.count(before[i])) {
      moves.push_back({name, old_order[i], static_cast<int64_t>(i + 1), 0});
    }
  }
  for (size_t i = 0; i < new_order.size(); ++i) {
    if (!old_position.count(new_order[i])) {
      moves.push_back({name, new_order[i], 0, static_cast<int64_t>(i + 1)});
    }
  }
  // Report in the order a reader scans the new order: by new position, removals last.
  std::stable_sort(moves.begin(), moves.end(), [](const OrderMove& x, const OrderMove& y) {
    const auto rank = [](const OrderMove& m) {
      return m.new_position ? m.new_position : INT64_MAX;
    };
    return rank(x) < rank(y);
  });
  if (moves.empty() && before != new_order) {
    // Duplicates (a plan that breaks the once-each rule): say the order changed.
    field(name, text_of(old_order), text_of(new_order));
  }
  diff_.orders.insert(diff_.orders.end(), moves.begin(), moves.end());
}

void Differ::compare_orders() {
  const auto roots = mapped(old_.roots);
  if (roots != new_.roots) field("roots", text_of(old_.roots), text_of(new_.roots));
  compare_order("forward_order", old_.forward_order, new_.forward_order);
  compare_order("backward_order", old_.backward_order, new_.backward_order);
}

std::string Differ::point_name(const ScheduleEntry& entry, const std::string& unit) {
  if (!entry.unit) return entry.point;
  std::string name = entry.point + " " + unit;
  if (entry.call != 0) name += "#" + std::to_string(entry.call);
  return name;
}

// Every unit's all-gather issue points per phase, names as the new plan calls them.
std::map<std::pair<std::string, std::string>, std::vector<std::string>> Differ::issue_points(
    const Plan& plan, bool is_old) const {
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> out;
  for (const ScheduleEntry& entry : plan.schedule) {
    const std::string unit = entry.unit ? (is_old ? mapped(*entry.unit) : *entry.unit) : "";
    for (const std::string& gathered : entry.all_gather) {
      const std::string name = is_old ? mapped(gathered) : gathered;
      out[{name, entry.phase}].push_back(point_name(entry, unit));
    }
  }
  return out;
}

void Differ::compare_schedule() {
  if (!shown("schedule")) return;
  const auto before = issue_points(old_, true);
  const auto after = issue_points(new_, false);
  std::set<std::pair<std::string, std::string>> keys;
  for (const auto& [key, points] : before) keys.insert(key);
  for (const auto& [key, points] : after) keys.insert(key);
  // Units in new definition order, then forward before backward.
  std::vector<std::pair<std::string, std::string>> ordered;
  for (const Unit& unit : new_.units) {
    for (const char* phase : {"forward", "backward"}) {
      if (keys.erase({unit.name, phase})) ordered.emplace_back(unit.name, phase);
    }
  }
  ordered.insert(ordered.end(), keys.begin(), keys.end());
  static const std::vector<std::string> none;
  for (const auto& key : ordered) {
    if (!in_both(key.first)) continue;  // an added or removed unit: its unit change says it
    const auto x = before.count(key) ? before.at(key) : none;
    const auto y = after.count(key) ? after.at(key) : none;
    for (size_t k = 0; k < std::max(x.size(), y.size()); ++k) {
      const std::string a = k < x.size() ? x[k] : "";
      const std::string b = k < y.size() ? y[k] : "";
      if (a != b) diff_.prefetch.push_back({key.first, key.second, static_cast<int64_t>(k), a, b});
    }
  }
  compare_schedule_entries();
}

void Differ::compare_schedule_entries() {
  using Key = std::tuple<std::string, std::string, std::string, int64_t, int>;
  const auto key_of = [](const ScheduleEntry& e, const std::string& unit,
                         std::map<Key, int>& seen) {
    Key key{e.phase, e.point, unit, e.call, 0};
    std::get<4>(key) = seen[key]++;
    return key;
  };
  std::map<Key, const ScheduleEntry*> old_entries;
  std::map<Key, int> seen;
  for (const ScheduleEntry& e : old_.schedule) {
    old_entries.emplace(key_of(e, e.unit ? mapped(*e.unit) : "", seen), &e);
  }
  seen.clear();
  std::set<Key> matched;
  for (const ScheduleEntry& e : new_.schedule) {
    const std::string unit = e.unit.value_or("");
    const Key key = key_of(e, unit, seen);
    const std::string point = point_name(e, unit);
    const auto it = old_entries.find(key);
    if (it == old_entries.end()) {
      if (!e.unit || in_both(unit)) diff_.schedule.push_back({point, "entry", "", "present"});
      continue;
    }
    matched.insert(key);
    const ScheduleEntry& o = *it->second;
    const auto list = [&](const char* what, const std::vector<std::string>& x,
                          const std::vector<std::string>& y) {
      if (mapped(x) != y) diff_.schedule.push_back({point, what, text_of(x), text_of(y)});
    };
    auto sorted = [&](std::vector<std::string> v) {
      std::sort(v.begin(), v.end());
      return v;
    };
    // A different set of all-gathers shows up as prefetch changes; only their order is new.
    if (sorted(mapped(o.all_gather)) == sorted(e.all_gather)) {
      list("all_gather", o.all_gather, e.all_gather);
    }
    list("wait", o.wait, e.wait);
    list("reshard", o.reshard, e.reshard);
    list("reduce_scatter", o.reduce_scatter, e.reduce_scatter);
    if (o.unsharded_bytes != e.unsharded_bytes) {
      diff_.schedule.push_back(
          {point, "unsharded_bytes", text_of(o.unsharded_bytes), text_of(e.unsharded_bytes)});
    }
  }
  for (const auto& [key, entry] : old_entries) {
    if (matched.count(key)) continue;
    const std::string unit = std::get<2>(key);
    if (entry->unit && !in_both(unit)) continue;
    diff_.schedule.push_back(
        {point_name(*entry, entry->unit ? *entry->unit : ""), "entry", "present", ""});
  }
}

// "pre_backward shared#1" of the old plan, with the unit as the new plan calls it.
std::string Differ::mapped_point(const std::string& point) const {
  const size_t space = point.find(' ');
  if (space == std::string::npos) return point;
  const size_t hash = point.find('#', space);
  const std::string unit = point.substr(space + 1, hash - std::min(hash, space + 1));
  return point.substr(0, space + 1) + mapped(unit) +
         (hash == std::string::npos ? "" : point.substr(hash));
}

}  // namespace mfsdp::schema::diff
