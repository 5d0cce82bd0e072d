#pragma once
// schema/diff/: the internals of diff_plans (schema/plan_diff.h), internal to the library. One
// Differ over two plans, one member function per comparison family, defined by family:
//  plan_index.cpp  text and size helpers, PlanIndex, longest_increasing, first_difference;
//  units.cpp       unit matching and changes, ownership moves, unit attributes and layout;
//  schedule.cpp    forward and backward orders, prefetch (all-gather issue points), schedule
//                  entries;
//  sections.cpp    header, memory and communication, diagnostics, trace, activations,
//                  prediction, training, and the JSON fallback;
//  ../plan_diff.cpp  Differ::run, the order the families run in.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "schema/plan.h"
#include "schema/plan_diff.h"

namespace mfsdp::schema::diff {

using nlohmann::ordered_json;

// Values as the JSON text a FieldChange holds.
std::string quoted(const std::string& text);
std::string text_of(int64_t value);
std::string text_of(bool value);
std::string text_of(const std::optional<std::string>& value);
std::string text_of(const std::vector<std::string>& items);
std::string text_of(const std::vector<int64_t>& items);

int64_t element_size(const std::string& dtype);  // 0 for a dtype this build does not know
int64_t add(int64_t a, int64_t b);               // fails kInternal on overflow
int64_t multiply(int64_t a, int64_t b);          // fails kInternal on overflow
// Whether an --ignore or --include rule names `field` or a field below it.
bool covers(const std::string& rule, const std::string& field);
std::string group_label(const Group& group);  // "float32", "int64 (no grad)"

std::set<size_t> longest_increasing(const std::vector<size_t>& sequence);
bool first_difference(const ordered_json& a, const ordered_json& b, const std::string& path,
                      FieldChange& out);
ordered_json measured_step_json(const Trace& trace);

struct ParamInfo {
  const ParamLayout* layout = nullptr;
  const Group* group = nullptr;
  std::string owner;
  int64_t bytes = 0;
};

// Name lookups over one plan. The first of duplicate names wins: a plan that parses but breaks
// the uniqueness rules still diffs without crashing.
struct PlanIndex {
  explicit PlanIndex(const Plan& plan);
  const Unit* unit(const std::string& name) const;
  const ParamInfo* param(const std::string& name) const;

  std::map<std::string, const Unit*> units;
  std::map<std::string, std::vector<std::string>> params_of;
  std::map<std::string, ParamInfo> params;
  std::vector<std::string> param_order;  // definition order
};

class Differ {
 public:
  Differ(const Plan& old_plan, const Plan& new_plan, const DiffOptions& options)
      : old_(old_plan),
        new_(new_plan),
        options_(options),
        old_index_(old_plan),
        new_index_(new_plan) {}

  PlanDiff run();

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

  // units.cpp
  void match_units();
  ParamFlow flow_to(const std::string& unit, bool kept) const;
  void add_param(ParamFlow& flow, const std::string& param, const ParamInfo& info) const;
  std::vector<ParamFlow> destinations(const std::string& a) const;
  std::vector<ParamFlow> sources(const std::string& b) const;
  UnitChange unit_change(UnitChange::Kind kind, const Unit& unit, const PlanIndex& index,
                         std::vector<ParamFlow> flows) const;
  void compare_units();
  std::vector<std::pair<const Unit*, const Unit*>> pair_units(std::vector<UnitChange>& changes);
  void compare_ownership();
  void compare_unit(const Unit& a, const Unit& b);
  void compare_layout(const Unit& a, const Unit& b, std::vector<LayoutChange>& out);

  // schedule.cpp
  void compare_order(const std::string& name, const std::vector<std::string>& old_order,
                     const std::vector<std::string>& new_order);
  void compare_orders();
  static std::string point_name(const ScheduleEntry& entry, const std::string& unit);
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> issue_points(
      const Plan& plan, bool is_old) const;
  void compare_schedule();
  void compare_schedule_entries();
  std::string mapped_point(const std::string& point) const;

  // sections.cpp
  void compare_header();
  void compare_memory_and_communication();
  void compare_diagnostics();
  void compare_prediction();
  void compare_training();
  void compare_activations();
  void compare_trace();
  void compare_trace_work();
  ordered_json visible_json(const Plan& plan) const;
  void add_fallback();

  const Plan& old_;
  const Plan& new_;
  const DiffOptions& options_;
  PlanIndex old_index_;
  PlanIndex new_index_;
  std::map<std::string, std::string> renamed_;       // old name -> new name
  std::map<std::string, std::string> renamed_from_;  // new name -> old name
  PlanDiff diff_;
};

}  // namespace mfsdp::schema::diff
