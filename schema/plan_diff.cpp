// diff_plans: one pass per category over two plans that share a unit naming. Units are matched
// by name, then leftover units by their parameter sets (renames); every later comparison goes
// through that matching, so a rename is reported once and not as changes everywhere.
#include "schema/plan_diff.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "schema/checked_int64.h"
#include "schema/error.h"
#include "schema/plan_json.h"
#include "schema/plan_rules.h"

namespace mfsdp::schema {
namespace {

using nlohmann::ordered_json;

std::string quoted(const std::string& text) {
  return ordered_json(text).dump();
}
std::string text_of(int64_t value) {
  return std::to_string(value);
}
std::string text_of(bool value) {
  return value ? "true" : "false";
}
std::string text_of(const std::optional<std::string>& value) {
  return value ? quoted(*value) : "null";
}
std::string text_of(const std::vector<std::string>& items) {
  return ordered_json(items).dump();
}
std::string text_of(const std::vector<int64_t>& items) {
  return ordered_json(items).dump();
}

// Plans that parse may still name a dtype this build does not know; size it 0 rather than fail.
int64_t element_size(const std::string& dtype) {
  try {
    return dtype_size(dtype);
  } catch (const Error&) {
    return 0;
  }
}

// Sums of sizes of plans that parse_plan accepted, which refuses plans whose sums do not fit in
// 64 bits: an overflow here is a bug.
int64_t add(int64_t a, int64_t b) {
  const std::optional<int64_t> sum = checked_add(a, b);
  if (!sum) fail(ExitCode::kInternal, "a plan size sum overflowed that parse_plan let through");
  return *sum;
}

int64_t multiply(int64_t a, int64_t b) {
  const std::optional<int64_t> product = checked_mul(a, b);
  if (!product)
    fail(ExitCode::kInternal, "a plan size product overflowed that parse_plan let through");
  return *product;
}

bool covers(const std::string& rule, const std::string& field) {
  if (field.compare(0, rule.size(), rule) != 0) return false;
  return field.size() == rule.size() || field[rule.size()] == '.' || field[rule.size()] == '[';
}

std::string group_label(const Group& group) {
  return group.requires_grad ? group.dtype : group.dtype + " (no grad)";
}

struct ParamInfo {
  const ParamLayout* layout = nullptr;
  const Group* group = nullptr;
  std::string owner;
  int64_t bytes = 0;
};

// Name lookups over one plan. The first of duplicate names wins: a plan that parses but breaks
// the uniqueness rules still diffs without crashing.
struct PlanIndex {
  explicit PlanIndex(const Plan& plan) {
    for (const Unit& unit : plan.units) {
      if (!units.emplace(unit.name, &unit).second) continue;
      auto& owned = params_of[unit.name];
      for (const Group& group : unit.groups) {
        for (const ParamLayout& param : group.params) {
          ParamInfo info{&param, &group, unit.name,
                         multiply(param.numel, element_size(group.dtype))};
          if (params.emplace(param.name, info).second) {
            owned.push_back(param.name);
            param_order.push_back(param.name);
          }
        }
      }
    }
  }
  const Unit* unit(const std::string& name) const {
    const auto it = units.find(name);
    return it == units.end() ? nullptr : it->second;
  }
  const ParamInfo* param(const std::string& name) const {
    const auto it = params.find(name);
    return it == params.end() ? nullptr : &it->second;
  }

  std::map<std::string, const Unit*> units;
  std::map<std::string, std::vector<std::string>> params_of;
  std::map<std::string, ParamInfo> params;
  std::vector<std::string> param_order;  // definition order
};

// Positions of `kept` items of `sequence` (indexes into `other`) forming a longest increasing
// run: the longest common subsequence of two orders in which every item appears once.
std::set<size_t> longest_increasing(const std::vector<size_t>& sequence) {
  std::vector<size_t> tails;  // index into sequence of the smallest tail of each length
  std::vector<size_t> previous(sequence.size(), SIZE_MAX);
  for (size_t i = 0; i < sequence.size(); ++i) {
    const auto at = std::lower_bound(tails.begin(), tails.end(), sequence[i],
                                     [&](size_t t, size_t value) { return sequence[t] < value; });
    if (at != tails.begin()) previous[i] = *(at - 1);
    if (at == tails.end()) {
      tails.push_back(i);
    } else {
      *at = i;
    }
  }
  std::set<size_t> kept;
  for (size_t i = tails.empty() ? SIZE_MAX : tails.back(); i != SIZE_MAX; i = previous[i]) {
    kept.insert(i);
  }
  return kept;
}

// The first JSON path at which two documents differ, with both values.
bool first_difference(const ordered_json& a, const ordered_json& b, const std::string& path,
                      FieldChange& out) {
  if (a == b) return false;
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items()) {
      const std::string child = path.empty() ? key : path + "." + key;
      if (!b.contains(key)) {
        out = {child, value.dump(), "(absent)"};
        return true;
      }
      if (first_difference(value, b.at(key), child, out)) return true;
    }
    for (const auto& [key, value] : b.items()) {
      if (!a.contains(key)) {
        out = {path.empty() ? key : path + "." + key, "(absent)", value.dump()};
        return true;
      }
    }
  }
  if (a.is_array() && b.is_array() && a.size() == b.size()) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (first_difference(a[i], b[i], path + "[" + std::to_string(i) + "]", out)) return true;
    }
  }
  out = {path, a.dump(), b.dump()};
  return true;
}

// A trace's measured figures for the whole step (the units' are in its times).
ordered_json measured_step_json(const Trace& trace) {
  ordered_json j = ordered_json::object();
  if (trace.loss_ms) j["loss_ms"] = *trace.loss_ms;
  if (trace.timed_steps) j["timed_steps"] = *trace.timed_steps;
  if (trace.threads) j["threads"] = *trace.threads;
  if (trace.calibration_gflops) j["calibration_gflops"] = *trace.calibration_gflops;
  return j;
}

class Differ {
 public:
  Differ(const Plan& old_plan, const Plan& new_plan, const DiffOptions& options)
      : old_(old_plan),
        new_(new_plan),
        options_(options),
        old_index_(old_plan),
        new_index_(new_plan) {}

  PlanDiff run() {
    for (const std::string& rule : options_.ignore) {
      // Ignoring trace times is news only to a reader of plans that have a trace, and
      // ignoring the prediction to one of plans that have one.
      if (covers("trace", rule) && !old_.trace && !new_.trace) continue;
      if (rule == "prediction" && !old_.prediction && !new_.prediction) continue;
      if (options_.ignores(rule)) diff_.ignored.push_back(rule);
    }
    match_units();
    compare_header();
    compare_units();
    compare_orders();
    compare_schedule();
    compare_memory_and_communication();
    compare_diagnostics();
    compare_trace();
    compare_prediction();
    compare_training();
    diff_.old_totals = plan_totals(old_);
    diff_.new_totals = plan_totals(new_);
    if (diff_.empty()) add_fallback();
    return std::move(diff_);
  }

 private:
  bool shown(const std::string& field) const { return !options_.ignores(field); }

  void field(std::vector<FieldChange>& out, const std::string& name, const std::string& old_value,
             const std::string& new_value) {
    if (old_value != new_value && shown(name)) out.push_back({name, old_value, new_value});
  }
  void field(const std::string& name, const std::string& old_value, const std::string& new_value) {
    field(diff_.fields, name, old_value, new_value);
  }
  void quantity(const std::string& name, int64_t old_value, int64_t new_value) {
    if (old_value != new_value && shown(name)) {
      diff_.quantities.push_back({name, old_value, new_value});
    }
  }

  // An old unit name as the new plan calls it.
  std::string mapped(const std::string& old_name) const {
    const auto it = renamed_.find(old_name);
    return it == renamed_.end() ? old_name : it->second;
  }
  std::vector<std::string> mapped(const std::vector<std::string>& old_names) const {
    std::vector<std::string> out;
    for (const auto& name : old_names) out.push_back(mapped(name));
    return out;
  }
  bool in_both(const std::string& new_name) const {
    return new_index_.unit(new_name) &&
           (old_index_.unit(new_name) || renamed_from_.count(new_name));
  }
  const Unit* old_unit_of(const std::string& new_name) const {
    const auto it = renamed_from_.find(new_name);
    return old_index_.unit(it == renamed_from_.end() ? new_name : it->second);
  }

  void match_units() {
    std::vector<std::string> old_only, new_only;
    for (const Unit& unit : old_.units) {
      if (!new_index_.unit(unit.name)) old_only.push_back(unit.name);
    }
    for (const Unit& unit : new_.units) {
      if (!old_index_.unit(unit.name)) new_only.push_back(unit.name);
    }
    const auto sorted_params = [](const PlanIndex& index, const std::string& unit) {
      auto params = index.params_of.at(unit);
      std::sort(params.begin(), params.end());
      return params;
    };
    std::set<std::string> taken;
    for (const std::string& a : old_only) {
      const auto params = sorted_params(old_index_, a);
      if (params.empty()) continue;
      for (const std::string& b : new_only) {
        if (!taken.count(b) && sorted_params(new_index_, b) == params) {
          taken.insert(b);
          renamed_[a] = b;
          renamed_from_[b] = a;
          break;
        }
      }
    }
  }

  void compare_header() {
    field("generator", quoted(old_.generator), quoted(new_.generator));
    const ModelInfo& a = old_.model;
    const ModelInfo& b = new_.model;
    field("model.path", quoted(a.path), quoted(b.path));
    field("model.sha256", quoted(a.sha256), quoted(b.sha256));
    field("model.structural_hash", quoted(a.structural_hash), quoted(b.structural_hash));
    field("model.modules", text_of(a.modules), text_of(b.modules));
    field("model.parameters", text_of(a.parameters), text_of(b.parameters));
    field("model.parameter_numel", text_of(a.parameter_numel), text_of(b.parameter_numel));
    field("mesh.world_size", text_of(old_.mesh.world_size), text_of(new_.mesh.world_size));
    field("mesh.shard_size", text_of(old_.mesh.shard_size), text_of(new_.mesh.shard_size));
    field("mesh.replicate_size", text_of(old_.mesh.replicate_size),
          text_of(new_.mesh.replicate_size));
    const Policy& p = old_.policy;
    const Policy& q = new_.policy;
    field("policy.param_dtype", text_of(p.param_dtype), text_of(q.param_dtype));
    field("policy.reduce_dtype", quoted(p.reduce_dtype), quoted(q.reduce_dtype));
    field("policy.reshard_after_forward", text_of(p.reshard_after_forward),
          text_of(q.reshard_after_forward));
    field("policy.forward_prefetch", text_of(p.forward_prefetch), text_of(q.forward_prefetch));
    field("policy.backward_prefetch", text_of(p.backward_prefetch), text_of(q.backward_prefetch));
    field("policy.resident_budget_bytes", text_of(p.resident_budget_bytes),
          text_of(q.resident_budget_bytes));
    field("policy.unified_stream", text_of(p.unified_stream), text_of(q.unified_stream));
    field("policy.align_bytes", text_of(p.align_bytes), text_of(q.align_bytes));
    const auto streams = [](const Plan& plan) {
      std::vector<std::string> out;
      for (const Stream& s : plan.streams) {
        std::string line = s.name + ":";
        for (const auto& c : s.collectives) line += " " + c;
        out.push_back(line);
      }
      return out;
    };
    field("streams", text_of(streams(old_)), text_of(streams(new_)));
  }

  ParamFlow flow_to(const std::string& unit, bool kept) const {
    ParamFlow flow;
    flow.unit = unit;
    flow.kept = kept;
    return flow;
  }
  void add_param(ParamFlow& flow, const std::string& param, const ParamInfo& info) const {
    flow.params.push_back(param);
    flow.numel = add(flow.numel, info.layout->numel);
    flow.bytes = add(flow.bytes, info.bytes);
  }

  // Where each parameter of old unit `a` went, keyed by its new owner ("" for gone).
  std::vector<ParamFlow> destinations(const std::string& a) const {
    std::vector<ParamFlow> flows;
    for (const std::string& param : old_index_.params_of.at(a)) {
      const ParamInfo* now = new_index_.param(param);
      const std::string to = now ? now->owner : "";
      auto it = std::find_if(flows.begin(), flows.end(), [&](auto& f) { return f.unit == to; });
      if (it == flows.end()) {
        flows.push_back(flow_to(to, !to.empty() && in_both(to)));
        it = flows.end() - 1;
      }
      add_param(*it, param, *old_index_.param(param));
    }
    return flows;
  }
  // Where each parameter of new unit `b` came from, keyed by its old owner ("" for new).
  std::vector<ParamFlow> sources(const std::string& b) const {
    std::vector<ParamFlow> flows;
    for (const std::string& param : new_index_.params_of.at(b)) {
      const ParamInfo* before = old_index_.param(param);
      const std::string from = before ? before->owner : "";
      auto it = std::find_if(flows.begin(), flows.end(), [&](auto& f) { return f.unit == from; });
      if (it == flows.end()) {
        flows.push_back(flow_to(from, !from.empty() && new_index_.unit(mapped(from))));
        it = flows.end() - 1;
      }
      add_param(*it, param, *new_index_.param(param));
    }
    return flows;
  }

  UnitChange unit_change(UnitChange::Kind kind, const Unit& unit, const PlanIndex& index,
                         std::vector<ParamFlow> flows) const {
    UnitChange change;
    change.kind = kind;
    change.name = unit.name;
    change.type = unit.type;
    for (const std::string& param : index.params_of.at(unit.name)) {
      ++change.params;
      change.numel = add(change.numel, index.param(param)->layout->numel);
    }
    change.flows = std::move(flows);
    return change;
  }

  void compare_units() {
    // Units only in one plan: renames first, then splits and merges, then the rest.
    std::set<std::string> split, merged;
    std::vector<std::pair<const Unit*, std::vector<ParamFlow>>> removed, added;
    std::vector<UnitChange> changes;
    for (const Unit& unit : old_.units) {
      if (new_index_.unit(unit.name) || renamed_.count(unit.name)) continue;
      auto flows = destinations(unit.name);
      if (flows.size() >= 2) split.insert(unit.name);
      removed.emplace_back(&unit, std::move(flows));
    }
    for (const Unit& unit : new_.units) {
      if (old_index_.unit(unit.name)) continue;
      if (const auto it = renamed_from_.find(unit.name); it != renamed_from_.end()) {
        UnitChange change = unit_change(UnitChange::Kind::kRenamed, unit, new_index_, {});
        change.old_name = it->second;
        changes.push_back(change);
        continue;
      }
      auto flows = sources(unit.name);
      if (flows.size() >= 2) merged.insert(unit.name);
      added.emplace_back(&unit, std::move(flows));
    }
    for (auto& [unit, flows] : removed) {
      const bool told_by_merge = flows.size() == 1 && merged.count(flows[0].unit);
      if (told_by_merge) continue;
      const auto kind =
          split.count(unit->name) ? UnitChange::Kind::kSplit : UnitChange::Kind::kRemoved;
      changes.push_back(unit_change(kind, *unit, old_index_, flows));
    }
    for (auto& [unit, flows] : added) {
      const bool told_by_split = flows.size() == 1 && split.count(flows[0].unit);
      if (told_by_split) continue;
      const auto kind =
          merged.count(unit->name) ? UnitChange::Kind::kMerged : UnitChange::Kind::kAdded;
      changes.push_back(unit_change(kind, *unit, new_index_, flows));
    }
    const auto pairs = pair_units(changes);
    if (shown("units")) diff_.units = std::move(changes);

    compare_ownership();
    for (const auto& [before, now] : pairs) compare_unit(*before, *now);
  }

  // Units of both plans to compare field by field. A name used twice (a plan the uniqueness
  // rules refuse, which diff still reads) pairs its units by occurrence; a later occurrence
  // without a partner is added or removed.
  std::vector<std::pair<const Unit*, const Unit*>> pair_units(std::vector<UnitChange>& changes) {
    std::map<std::string, std::vector<const Unit*>> old_named;
    for (const Unit& unit : old_.units) old_named[mapped(unit.name)].push_back(&unit);
    std::map<std::string, size_t> seen;
    std::vector<std::pair<const Unit*, const Unit*>> pairs;
    for (const Unit& unit : new_.units) {
      const size_t k = seen[unit.name]++;
      if (k == 0) {
        if (const Unit* before = old_unit_of(unit.name)) pairs.emplace_back(before, &unit);
        continue;
      }
      if (!old_unit_of(unit.name)) continue;  // every occurrence is added above
      const auto& olds = old_named[unit.name];
      if (k < olds.size()) {
        pairs.emplace_back(olds[k], &unit);
      } else {
        changes.push_back(unit_change(UnitChange::Kind::kAdded, unit, new_index_, {}));
      }
    }
    for (const auto& [name, olds] : old_named) {
      if (!seen.count(name)) continue;  // every occurrence is removed (or renamed) above
      for (size_t k = seen.at(name); k < olds.size(); ++k) {
        changes.push_back(unit_change(UnitChange::Kind::kRemoved, *olds[k], old_index_, {}));
      }
    }
    return pairs;
  }

  // Parameters changing hands between units in both plans.
  void compare_ownership() {
    if (!shown("units.ownership")) return;
    std::map<std::pair<std::string, std::string>, ParamMove> moves;
    std::vector<std::pair<std::string, std::string>> order;
    const auto note = [&](const std::string& from, const std::string& to, const std::string& param,
                          const ParamInfo& info) {
      const auto key = std::make_pair(from, to);
      auto [it, fresh] = moves.try_emplace(key);
      if (fresh) {
        it->second.from = from;
        it->second.to = to;
        order.push_back(key);
      }
      it->second.params.push_back(param);
      it->second.numel = add(it->second.numel, info.layout->numel);
      it->second.bytes = add(it->second.bytes, info.bytes);
    };
    for (const std::string& param : old_index_.param_order) {
      const ParamInfo& before = *old_index_.param(param);
      const ParamInfo* now = new_index_.param(param);
      const std::string from = mapped(before.owner);
      if (!in_both(from)) continue;
      if (!now) {
        note(from, "", param, before);
      } else if (now->owner != from && in_both(now->owner)) {
        note(from, now->owner, param, *now);
      }
    }
    for (const std::string& param : new_index_.param_order) {
      const ParamInfo& now = *new_index_.param(param);
      if (!old_index_.param(param) && in_both(now.owner)) note("", now.owner, param, now);
    }
    for (const auto& key : order) diff_.moves.push_back(moves.at(key));
  }

  void compare_unit(const Unit& a, const Unit& b) {
    UnitUpdate update;
    update.name = b.name;
    const auto unit_field = [&](const std::string& key, const std::string& x,
                                const std::string& y) {
      field(update.fields, "units." + key, x, y);
    };
    unit_field("type", quoted(a.type), quoted(b.type));
    const auto parent = a.parent ? std::optional(mapped(*a.parent)) : std::nullopt;
    unit_field("parent", text_of(parent), text_of(b.parent));
    unit_field("root", text_of(a.root), text_of(b.root));
    unit_field("call_count", text_of(a.call_count), text_of(b.call_count));
    unit_field("conditional", text_of(a.conditional), text_of(b.conditional));
    unit_field("repeated", text_of(a.repeated), text_of(b.repeated));
    unit_field("kept_after_forward", text_of(a.kept_after_forward), text_of(b.kept_after_forward));
    unit_field("checkpoint", text_of(a.checkpoint), text_of(b.checkpoint));
    const auto buffers = [](const Unit& unit) {
      std::vector<std::string> out;
      for (const auto& buffer : unit.buffers) {
        out.push_back(buffer.name + " " + buffer.dtype + text_of(buffer.shape));
      }
      return out;
    };
    unit_field("buffers", text_of(buffers(a)), text_of(buffers(b)));
    if (shown("units.groups")) compare_layout(a, b, update.layout);
    if (!update.layout.empty()) {
      unit_field("unsharded_bytes", text_of(a.unsharded_bytes), text_of(b.unsharded_bytes));
      unit_field("sharded_bytes", text_of(a.sharded_bytes), text_of(b.sharded_bytes));
    }
    if (!update.fields.empty() || !update.layout.empty()) diff_.updates.push_back(update);
  }

  void compare_layout(const Unit& a, const Unit& b, std::vector<LayoutChange>& out) {
    std::map<std::string, const Group*> old_groups, new_groups;
    for (const Group& g : a.groups) old_groups.emplace(group_label(g), &g);
    for (const Group& g : b.groups) new_groups.emplace(group_label(g), &g);
    const auto elements = [](int64_t n) { return text_of(n); };
    for (const Group& g : a.groups) {
      const std::string label = group_label(g);
      const auto it = new_groups.find(label);
      if (it == new_groups.end()) {
        out.push_back({label, "group", elements(g.numel), ""});
        continue;
      }
      const Group& h = *it->second;
      if (g.numel != h.numel) out.push_back({label, "numel", elements(g.numel), elements(h.numel)});
      const int64_t pad_a = g.padded_numel - g.numel, pad_b = h.padded_numel - h.numel;
      if (pad_a != pad_b) out.push_back({label, "padding", elements(pad_a), elements(pad_b)});
    }
    for (const Group& h : b.groups) {
      const std::string label = group_label(h);
      if (!old_groups.count(label)) out.push_back({label, "group", "", elements(h.numel)});
    }
    // Parameters the unit owns in both plans; moved ones are reported as moves.
    for (const std::string& param : new_index_.params_of.at(b.name)) {
      const ParamInfo* before = old_index_.param(param);
      if (!before || before->owner != a.name) continue;
      const ParamInfo& now = *new_index_.param(param);
      const ParamLayout& x = *before->layout;
      const ParamLayout& y = *now.layout;
      if (before->group->dtype != now.group->dtype) {
        out.push_back({param, "dtype", before->group->dtype, now.group->dtype});
      }
      if (before->group->requires_grad != now.group->requires_grad) {
        out.push_back({param, "requires_grad", text_of(before->group->requires_grad),
                       text_of(now.group->requires_grad)});
      }
      if (x.shape != y.shape) out.push_back({param, "shape", text_of(x.shape), text_of(y.shape)});
      if (x.shape == y.shape && x.numel != y.numel) {
        out.push_back({param, "numel", text_of(x.numel), text_of(y.numel)});
      }
      if (x.offset != y.offset) {
        out.push_back({param, "offset", text_of(x.offset), text_of(y.offset)});
      }
      if (x.aliases != y.aliases) {
        out.push_back({param, "aliases", text_of(x.aliases), text_of(y.aliases)});
      }
    }
  }

  void compare_order(const std::string& name, const std::vector<std::string>& old_order,
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

  void compare_orders() {
    const auto roots = mapped(old_.roots);
    if (roots != new_.roots) field("roots", text_of(old_.roots), text_of(new_.roots));
    compare_order("forward_order", old_.forward_order, new_.forward_order);
    compare_order("backward_order", old_.backward_order, new_.backward_order);
  }

  static std::string point_name(const ScheduleEntry& entry, const std::string& unit) {
    if (!entry.unit) return entry.point;
    std::string name = entry.point + " " + unit;
    if (entry.call != 0) name += "#" + std::to_string(entry.call);
    return name;
  }

  // Every unit's all-gather issue points per phase, names as the new plan calls them.
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> issue_points(
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

  void compare_schedule() {
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
        if (a != b)
          diff_.prefetch.push_back({key.first, key.second, static_cast<int64_t>(k), a, b});
      }
    }
    compare_schedule_entries();
  }

  void compare_schedule_entries() {
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
  std::string mapped_point(const std::string& point) const {
    const size_t space = point.find(' ');
    if (space == std::string::npos) return point;
    const size_t hash = point.find('#', space);
    const std::string unit = point.substr(space + 1, hash - std::min(hash, space + 1));
    return point.substr(0, space + 1) + mapped(unit) +
           (hash == std::string::npos ? "" : point.substr(hash));
  }

  void compare_memory_and_communication() {
    const Memory& m = old_.memory;
    const Memory& n = new_.memory;
    quantity("memory.sharded_param_bytes", m.sharded_param_bytes, n.sharded_param_bytes);
    quantity("memory.sharded_grad_bytes", m.sharded_grad_bytes, n.sharded_grad_bytes);
    quantity("memory.peak_unsharded_bytes", m.peak_unsharded_bytes, n.peak_unsharded_bytes);
    field("memory.peak_at", quoted(mapped_point(m.peak_at)), quoted(n.peak_at));
    quantity("memory.slot_bytes", m.slot_bytes, n.slot_bytes);
    // Which units share a slot, "layers.0 & layers.2" ('+' joins a merged unit's modules);
    // slot_bytes above tells the sizes.
    const auto slots = [this](const Memory& memory, bool is_old) {
      std::vector<std::string> out;
      for (const Slot& slot : memory.slots) {
        std::string line;
        for (const auto& unit : slot.units) {
          line += (line.empty() ? "" : " & ") + (is_old ? mapped(unit) : unit);
        }
        out.push_back(line);
      }
      return out;
    };
    field("memory.slots", text_of(slots(m, true)), text_of(slots(n, false)));
    compare_activations();
    const Communication& c = old_.communication;
    const Communication& d = new_.communication;
    quantity("communication.all_gather_count", c.all_gather_count, d.all_gather_count);
    quantity("communication.all_gather_bytes", c.all_gather_bytes, d.all_gather_bytes);
    quantity("communication.reduce_scatter_count", c.reduce_scatter_count, d.reduce_scatter_count);
    quantity("communication.reduce_scatter_bytes", c.reduce_scatter_bytes, d.reduce_scatter_bytes);
    quantity("communication.all_reduce_bytes", c.all_reduce_bytes, d.all_reduce_bytes);
  }

  void compare_diagnostics() {
    if (!shown("diagnostics")) return;
    using Key = std::tuple<std::string, std::string, std::string>;
    const auto key_of = [](const Diagnostic& d) { return Key{d.severity, d.code, d.where}; };
    std::map<Key, std::vector<const Diagnostic*>> old_by_key;
    for (const Diagnostic& d : old_.diagnostics) {
      // `where` may name a unit: compare under its new name.
      old_by_key[Key{d.severity, d.code, mapped(d.where)}].push_back(&d);
    }
    std::vector<DiagnosticChange> removed;
    for (const Diagnostic& d : new_.diagnostics) {
      auto& candidates = old_by_key[key_of(d)];
      if (candidates.empty()) {
        diff_.diagnostics.push_back({DiagnosticChange::Kind::kAdded, d, ""});
        continue;
      }
      // Prefer an identical message, so reordering alone reports nothing.
      auto it = std::find_if(candidates.begin(), candidates.end(),
                             [&](const Diagnostic* o) { return o->message == d.message; });
      if (it == candidates.end()) {
        it = candidates.begin();
        diff_.diagnostics.push_back({DiagnosticChange::Kind::kChanged, d, (*it)->message});
      }
      candidates.erase(it);
    }
    for (const Diagnostic& d : old_.diagnostics) {
      auto& left = old_by_key[Key{d.severity, d.code, mapped(d.where)}];
      const auto it = std::find(left.begin(), left.end(), &d);
      if (it != left.end()) removed.push_back({DiagnosticChange::Kind::kRemoved, d, ""});
    }
    diff_.diagnostics.insert(diff_.diagnostics.end(), removed.begin(), removed.end());
  }

  // The predicted step as one field: it follows measured times, so it is ignored by default.
  void compare_prediction() {
    if (!shown("prediction")) return;
    const auto text = [](const std::optional<StepPrediction>& p) {
      return p ? plan_prediction_json(*p).dump() : std::string("null");
    };
    field("prediction", text(old_.prediction), text(new_.prediction));
  }

  // The training section key by key ("null" where a plan does not set the key).
  void compare_training() {
    const auto section = [](const std::optional<Training>& t) {
      return t ? training_to_json(*t) : ordered_json::object();
    };
    const ordered_json old_section = section(old_.training);
    const ordered_json new_section = section(new_.training);
    std::set<std::string> keys;
    for (auto it = old_section.begin(); it != old_section.end(); ++it) keys.insert(it.key());
    for (auto it = new_section.begin(); it != new_section.end(); ++it) keys.insert(it.key());
    for (const std::string& key : keys) {
      const auto text = [&key](const ordered_json& j) {
        return j.contains(key) ? j.at(key).dump() : std::string("null");
      };
      field("training." + key, text(old_section), text(new_section));
    }
  }

  // Measured activations: quantities when both plans have them, else present against null;
  // per unit the saved bytes, by the unit's name in the new plan.
  void compare_activations() {
    const std::optional<Activations>& m = old_.memory.activations;
    const std::optional<Activations>& n = new_.memory.activations;
    if (!m || !n) {
      field("memory.activations", m ? "present" : "null", n ? "present" : "null");
      return;
    }
    quantity("memory.activations.microbatch", m->microbatch, n->microbatch);
    quantity("memory.activations.peak_bytes", m->peak_bytes, n->peak_bytes);
    field("memory.activations.peak_at", quoted(mapped_point(m->peak_at)), quoted(n->peak_at));
    quantity("memory.activations.output_bytes", m->output_bytes, n->output_bytes);
    field("memory.activations.loss", quoted(m->loss), quoted(n->loss));
    quantity("memory.activations.combined_peak_bytes", m->combined_peak_bytes,
             n->combined_peak_bytes);
    if (!shown("memory.activations.units")) return;
    std::map<std::string, int64_t> old_saved;
    for (const UnitActivations& unit : m->units) old_saved[mapped(unit.unit)] = unit.saved_bytes;
    for (const UnitActivations& unit : n->units) {
      const auto it = old_saved.find(unit.unit);
      const std::string name = "memory.activations.units[" + unit.unit + "].saved_bytes";
      if (it == old_saved.end()) {
        field(name, "null", text_of(unit.saved_bytes));
        continue;
      }
      if (it->second != unit.saved_bytes) {
        diff_.quantities.push_back({name, it->second, unit.saved_bytes});
      }
      old_saved.erase(it);
    }
    for (const auto& [unit, bytes] : old_saved) {
      field("memory.activations.units[" + unit + "].saved_bytes", text_of(bytes), "null");
    }
  }

  // The trace section as fields: its lists, and per unit its times as a JSON object ("null"
  // where a plan has no trace or no time for the unit).
  void compare_trace() {
    const auto list = [](const std::optional<Trace>& trace,
                         std::vector<std::string> Trace::*member) {
      return trace ? text_of((*trace).*member) : "null";
    };
    field("trace.inputs", list(old_.trace, &Trace::inputs), list(new_.trace, &Trace::inputs));
    field("trace.differs_from_static", list(old_.trace, &Trace::differs_from_static),
          list(new_.trace, &Trace::differs_from_static));
    if (!shown("trace.times")) return;
    const auto time_text = [](const UnitTime& time) {
      ordered_json j = ordered_json::object();
      j["forward_ms"] = time.forward_ms;
      j["backward_ms"] = time.backward_ms;
      if (time.pre_forward_ms) j["pre_forward_ms"] = *time.pre_forward_ms;
      if (time.post_forward_ms) j["post_forward_ms"] = *time.post_forward_ms;
      return j.dump();
    };
    // The step's measured figures beside the units' (docs/plan-format.md#trace).
    const auto step_text = [](const std::optional<Trace>& trace) -> std::string {
      if (!trace) return "null";
      const ordered_json j = measured_step_json(*trace);
      return j.empty() ? "null" : j.dump();
    };
    field("trace.times.step", step_text(old_.trace), step_text(new_.trace));
    std::map<std::string, std::string> old_times;  // by the unit's name in the new plan
    if (old_.trace) {
      for (const UnitTime& time : old_.trace->times) old_times[mapped(time.unit)] = time_text(time);
    }
    std::set<std::string> seen;
    if (new_.trace) {
      for (const UnitTime& time : new_.trace->times) {
        const auto it = old_times.find(time.unit);
        seen.insert(time.unit);
        field("trace.times[" + time.unit + "]", it == old_times.end() ? "null" : it->second,
              time_text(time));
      }
    }
    if (old_.trace) {
      for (const UnitTime& time : old_.trace->times) {
        if (!seen.count(mapped(time.unit))) {
          field("trace.times[" + mapped(time.unit) + "]", time_text(time), "null");
        }
      }
    }
  }

  // The plans as JSON, without what the options ignore and without the sizes that follow
  // from a unit's layout, the mesh and the policy (reported with their causes).
  ordered_json visible_json(const Plan& plan) const {
    ordered_json doc = plan_to_json(plan);
    for (auto& unit : doc["units"]) {
      unit.erase("unsharded_bytes");
      unit.erase("sharded_bytes");
      for (auto& group : unit["groups"]) group.erase("shard_numel");
    }
    if (options_.ignores("trace.times") && doc.contains("trace")) {
      const ordered_json measured = measured_step_json(*plan.trace);
      for (auto it = measured.begin(); it != measured.end(); ++it) doc["trace"].erase(it.key());
    }
    for (const std::string& name : diff_field_names()) {
      if (!options_.ignores(name)) continue;
      const size_t dot = name.find('.');
      if (dot == std::string::npos) {
        doc.erase(name);
      } else if (name.compare(0, dot, "units") == 0) {
        const std::string key =
            name.substr(dot + 1) == "ownership" ? "groups" : name.substr(dot + 1);
        if (doc.contains("units")) {
          for (auto& unit : doc["units"]) unit.erase(key);
        }
      } else if (doc.contains(name.substr(0, dot))) {
        doc[name.substr(0, dot)].erase(name.substr(dot + 1));
      }
    }
    return doc;
  }

  void add_fallback() {
    FieldChange change;
    if (first_difference(visible_json(old_), visible_json(new_), "", change)) {
      diff_.fields.push_back(change);
    }
  }

  const Plan& old_;
  const Plan& new_;
  const DiffOptions& options_;
  PlanIndex old_index_;
  PlanIndex new_index_;
  std::map<std::string, std::string> renamed_;       // old name -> new name
  std::map<std::string, std::string> renamed_from_;  // new name -> old name
  PlanDiff diff_;
};

}  // namespace

const std::vector<std::string>& diff_field_names() {
  static const std::vector<std::string> names = {
      "generator",
      "model",
      "model.path",
      "model.sha256",
      "model.structural_hash",
      "model.modules",
      "model.parameters",
      "model.parameter_numel",
      "mesh",
      "mesh.world_size",
      "mesh.shard_size",
      "mesh.replicate_size",
      "policy",
      "policy.param_dtype",
      "policy.reduce_dtype",
      "policy.reshard_after_forward",
      "policy.forward_prefetch",
      "policy.backward_prefetch",
      "policy.resident_budget_bytes",
      "policy.unified_stream",
      "policy.align_bytes",
      "streams",
      "units",
      "units.ownership",
      "units.type",
      "units.parent",
      "units.root",
      "units.call_count",
      "units.conditional",
      "units.repeated",
      "units.kept_after_forward",
      "units.checkpoint",
      "units.unsharded_bytes",
      "units.sharded_bytes",
      "units.groups",
      "units.buffers",
      "roots",
      "forward_order",
      "backward_order",
      "schedule",
      "memory",
      "memory.sharded_param_bytes",
      "memory.sharded_grad_bytes",
      "memory.peak_unsharded_bytes",
      "memory.peak_at",
      "memory.slot_bytes",
      "memory.slots",
      "memory.activations",
      "memory.activations.microbatch",
      "memory.activations.peak_bytes",
      "memory.activations.peak_at",
      "memory.activations.output_bytes",
      "memory.activations.loss",
      "memory.activations.combined_peak_bytes",
      "memory.activations.units",
      "communication",
      "communication.all_gather_count",
      "communication.all_gather_bytes",
      "communication.reduce_scatter_count",
      "communication.reduce_scatter_bytes",
      "communication.all_reduce_bytes",
      "diagnostics",
      "trace",
      "trace.inputs",
      "trace.differs_from_static",
      "trace.times",
      "prediction",
  };
  return names;
}

const std::vector<std::string>& default_ignored_fields() {
  static const std::vector<std::string> names = {"generator", "model.path", "model.sha256",
                                                 "trace.times", "prediction"};
  return names;
}

bool DiffOptions::ignores(const std::string& field) const {
  size_t ignore_depth = 0, include_depth = 0;
  for (const auto& rule : ignore) {
    const bool taken_back = std::any_of(include.begin(), include.end(),
                                        [&](const std::string& i) { return covers(i, rule); });
    if (!taken_back && covers(rule, field)) ignore_depth = std::max(ignore_depth, rule.size() + 1);
  }
  for (const auto& rule : include) {
    if (covers(rule, field)) include_depth = std::max(include_depth, rule.size() + 1);
  }
  return ignore_depth > include_depth;
}

bool Quantity::is_bytes() const {
  return field.size() > 6 && field.compare(field.size() - 6, 6, "_bytes") == 0;
}

const char* unit_change_kind_name(UnitChange::Kind kind) {
  switch (kind) {
    case UnitChange::Kind::kAdded:
      return "added";
    case UnitChange::Kind::kRemoved:
      return "removed";
    case UnitChange::Kind::kRenamed:
      return "renamed";
    case UnitChange::Kind::kSplit:
      return "split";
    case UnitChange::Kind::kMerged:
      return "merged";
  }
  return "changed";
}

PlanTotals plan_totals(const Plan& plan) {
  const std::optional<int64_t> per_rank = per_rank_bytes(plan.memory);
  const std::optional<int64_t> communication = communication_bytes(plan.communication);
  if (!per_rank || !communication) {
    fail(ExitCode::kInternal, "a plan total overflowed that parse_plan let through");
  }
  PlanTotals totals;
  totals.per_rank_bytes = *per_rank;
  totals.peak_unsharded_bytes = plan.memory.peak_unsharded_bytes;
  totals.communication_bytes = *communication;
  return totals;
}

bool PlanDiff::empty() const {
  return fields.empty() && units.empty() && moves.empty() && updates.empty() && orders.empty() &&
         prefetch.empty() && schedule.empty() && quantities.empty() && diagnostics.empty();
}

PlanDiff diff_plans(const Plan& old_plan, const Plan& new_plan, const DiffOptions& options) {
  return Differ(old_plan, new_plan, options).run();
}

}  // namespace mfsdp::schema
