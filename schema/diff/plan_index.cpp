// The diff's text and size helpers, the name lookups over one plan, and the order and JSON
// comparisons the families share.
#include <algorithm>
#include <cstdint>

#include "schema/checked_int64.h"
#include "schema/diff/differ.h"
#include "schema/error.h"

namespace mfsdp::schema::diff {

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

PlanIndex::PlanIndex(const Plan& plan) {
  for (const Unit& unit : plan.units) {
    if (!units.emplace(unit.name, &unit).second) continue;
    auto& owned = params_of[unit.name];
    for (const Group& group : unit.groups) {
      for (const ParamLayout& param : group.params) {
        ParamInfo info{&param, &group, unit.name, multiply(param.numel, element_size(group.dtype))};
        if (params.emplace(param.name, info).second) {
          owned.push_back(param.name);
          param_order.push_back(param.name);
        }
      }
    }
  }
}

const Unit* PlanIndex::unit(const std::string& name) const {
  const auto it = units.find(name);
  return it == units.end() ? nullptr : it->second;
}

const ParamInfo* PlanIndex::param(const std::string& name) const {
  const auto it = params.find(name);
  return it == params.end() ? nullptr : &it->second;
}

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

}  // namespace mfsdp::schema::diff
