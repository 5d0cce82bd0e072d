#pragma once
// Gates on a plan diff, so CI can fail on a regression rather than on any change:
// `mfsdp diff --fail-on memory-increase=5%` trips only when per-rank memory grows by more
// than 5%. The command-line syntax is parsed in cli/diff_command.cpp.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schema/plan_diff.h"

namespace mfsdp::schema {

struct DiffThreshold {
  enum class Kind {
    kAny,               // any change the diff shows
    kMemoryIncrease,    // PlanTotals::per_rank_bytes grew by more than the amount
    kPeakIncrease,      // PlanTotals::peak_unsharded_bytes grew by more than the amount
    kCommIncrease,      // PlanTotals::communication_bytes grew by more than the amount
    kUnitsChanged,      // a unit added, removed, renamed, split or merged
    kOwnershipChanged,  // a parameter moved between units (or a unit change moved some)
    kOrderChanged,      // roots, forward_order or backward_order
    kLayoutChanged,     // a unit's flat layout (units.groups)
    kScheduleChanged,   // prefetch points or other schedule actions
    kMeshChanged,       // mesh.*
    kPolicyChanged,     // policy.* or streams
    kModelChanged,      // model.* (that is not ignored)
    kDiagnosticsAdded,  // a diagnostic added, at least `min_severity`
  };
  Kind kind = Kind::kAny;
  std::string text;  // as written, e.g. "memory-increase=5%"
  // Increase thresholds: trip when the increase is more than `percent` % of the old value
  // (any increase from 0 counts as infinite) or more than `bytes` bytes. One of them is set.
  std::optional<double> percent;
  std::optional<int64_t> bytes;
  std::string min_severity = "info";  // diagnostics-added: info, warning or error
};

// "memory-increase", "units-changed", ...; what --fail-on accepts before any '='.
const std::vector<std::string>& threshold_names();
std::optional<DiffThreshold::Kind> threshold_kind(const std::string& name);
// Whether the threshold needs an amount (N% or a byte size) after '='.
bool threshold_takes_amount(DiffThreshold::Kind kind);

struct ThresholdResult {
  std::string threshold;  // DiffThreshold::text
  bool tripped = false;
  std::string measure;  // "per-rank memory", "unit changes", ...
  // Increase thresholds: the totals compared.
  bool is_increase = false;
  int64_t old_value = 0;
  int64_t new_value = 0;
  // Change thresholds: how many changes of that kind the diff shows.
  int64_t changes = 0;
};

// Percentage change from old to new; nullopt when old is 0.
std::optional<double> percent_change(int64_t old_value, int64_t new_value);

std::vector<ThresholdResult> check_thresholds(const PlanDiff& diff,
                                              const std::vector<DiffThreshold>& thresholds);

}  // namespace mfsdp::schema
