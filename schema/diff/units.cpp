// Units: matching by name and by parameter set, added, removed, renamed, split and merged
// units, parameters changing hands, and each paired unit's attributes and flat layout.
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "schema/diff/differ.h"

namespace mfsdp::schema::diff {

void Differ::match_units() {
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

ParamFlow Differ::flow_to(const std::string& unit, bool kept) const {
  ParamFlow flow;
  flow.unit = unit;
  flow.kept = kept;
  return flow;
}

void Differ::add_param(ParamFlow& flow, const std::string& param, const ParamInfo& info) const {
  flow.params.push_back(param);
  flow.numel = add(flow.numel, info.layout->numel);
  flow.bytes = add(flow.bytes, info.bytes);
}

// Where each parameter of old unit `a` went, keyed by its new owner ("" for gone).
std::vector<ParamFlow> Differ::destinations(const std::string& a) const {
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
std::vector<ParamFlow> Differ::sources(const std::string& b) const {
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

UnitChange Differ::unit_change(UnitChange::Kind kind, const Unit& unit, const PlanIndex& index,
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

void Differ::compare_units() {
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
std::vector<std::pair<const Unit*, const Unit*>> Differ::pair_units(
    std::vector<UnitChange>& changes) {
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
void Differ::compare_ownership() {
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

void Differ::compare_unit(const Unit& a, const Unit& b) {
  UnitUpdate update;
  update.name = b.name;
  const auto unit_field = [&](const std::string& key, const std::string& x, const std::string& y) {
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

void Differ::compare_layout(const Unit& a, const Unit& b, std::vector<LayoutChange>& out) {
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

}  // namespace mfsdp::schema::diff
