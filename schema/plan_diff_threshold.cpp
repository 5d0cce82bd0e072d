#include "schema/plan_diff_threshold.h"

#include <cmath>
#include <utility>

namespace mfsdp::schema {
namespace {

using Kind = DiffThreshold::Kind;

const std::vector<std::pair<std::string, Kind>>& kinds() {
  static const std::vector<std::pair<std::string, Kind>> table = {
      {"any", Kind::kAny},
      {"memory-increase", Kind::kMemoryIncrease},
      {"peak-increase", Kind::kPeakIncrease},
      {"comm-increase", Kind::kCommIncrease},
      {"units-changed", Kind::kUnitsChanged},
      {"ownership-changed", Kind::kOwnershipChanged},
      {"order-changed", Kind::kOrderChanged},
      {"layout-changed", Kind::kLayoutChanged},
      {"schedule-changed", Kind::kScheduleChanged},
      {"mesh-changed", Kind::kMeshChanged},
      {"policy-changed", Kind::kPolicyChanged},
      {"model-changed", Kind::kModelChanged},
      {"diagnostics-added", Kind::kDiagnosticsAdded},
  };
  return table;
}

int severity_rank(const std::string& severity) {
  if (severity == "error") return 2;
  if (severity == "warning") return 1;
  return 0;
}

bool starts_with(const std::string& text, const char* prefix) {
  return text.rfind(prefix, 0) == 0;
}

int64_t count_fields(const PlanDiff& diff, const std::vector<const char*>& prefixes) {
  int64_t n = 0;
  for (const FieldChange& change : diff.fields) {
    for (const char* prefix : prefixes) n += starts_with(change.field, prefix);
  }
  return n;
}

ThresholdResult increase(const DiffThreshold& threshold, const char* measure, int64_t old_value,
                         int64_t new_value) {
  ThresholdResult result;
  result.measure = measure;
  result.is_increase = true;
  result.old_value = old_value;
  result.new_value = new_value;
  const int64_t growth = new_value - old_value;
  if (growth <= 0) return result;
  if (threshold.bytes) {
    result.tripped = growth > *threshold.bytes;
  } else {
    const auto percent = percent_change(old_value, new_value);
    result.tripped = !percent || *percent > threshold.percent.value_or(0.0);
  }
  return result;
}

ThresholdResult changes(const char* measure, int64_t count) {
  ThresholdResult result;
  result.measure = measure;
  result.changes = count;
  result.tripped = count > 0;
  return result;
}

int64_t change_count(const PlanDiff& diff) {
  int64_t n =
      static_cast<int64_t>(diff.fields.size() + diff.units.size() + diff.moves.size() +
                           diff.orders.size() + diff.prefetch.size() + diff.schedule.size() +
                           diff.quantities.size() + diff.diagnostics.size());
  for (const UnitUpdate& update : diff.updates) {
    n += static_cast<int64_t>(update.fields.size() + update.layout.size());
  }
  return n;
}

ThresholdResult evaluate(const PlanDiff& diff, const DiffThreshold& threshold) {
  const PlanTotals& a = diff.old_totals;
  const PlanTotals& b = diff.new_totals;
  switch (threshold.kind) {
    case Kind::kAny:
      return changes("changes", change_count(diff));
    case Kind::kMemoryIncrease:
      return increase(threshold, "per-rank memory", a.per_rank_bytes, b.per_rank_bytes);
    case Kind::kPeakIncrease:
      return increase(threshold, "peak unsharded memory", a.peak_unsharded_bytes,
                      b.peak_unsharded_bytes);
    case Kind::kCommIncrease:
      return increase(threshold, "communication", a.communication_bytes, b.communication_bytes);
    case Kind::kUnitsChanged:
      return changes("unit changes", static_cast<int64_t>(diff.units.size()));
    case Kind::kOwnershipChanged: {
      int64_t n = static_cast<int64_t>(diff.moves.size());
      for (const UnitChange& change : diff.units) {
        for (const ParamFlow& flow : change.flows) n += !flow.params.empty();
      }
      return changes("ownership changes", n);
    }
    case Kind::kOrderChanged:
      return changes("order changes",
                     static_cast<int64_t>(diff.orders.size()) +
                         count_fields(diff, {"roots", "forward_order", "backward_order"}));
    case Kind::kLayoutChanged: {
      int64_t n = 0;
      for (const UnitUpdate& update : diff.updates) n += update.layout.size();
      return changes("layout changes", n);
    }
    case Kind::kScheduleChanged:
      return changes("schedule changes",
                     static_cast<int64_t>(diff.prefetch.size() + diff.schedule.size()) +
                         count_fields(diff, {"schedule"}));
    case Kind::kMeshChanged:
      return changes("mesh changes", count_fields(diff, {"mesh."}));
    case Kind::kPolicyChanged:
      return changes("policy changes", count_fields(diff, {"policy.", "streams"}));
    case Kind::kModelChanged:
      return changes("model changes", count_fields(diff, {"model."}));
    case Kind::kDiagnosticsAdded: {
      int64_t n = 0;
      for (const DiagnosticChange& change : diff.diagnostics) {
        n += change.kind == DiagnosticChange::Kind::kAdded &&
             severity_rank(change.diagnostic.severity) >= severity_rank(threshold.min_severity);
      }
      return changes("diagnostics added", n);
    }
  }
  return changes("changes", change_count(diff));
}

}  // namespace

const std::vector<std::string>& threshold_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [name, kind] : kinds()) out.push_back(name);
    return out;
  }();
  return names;
}

std::optional<DiffThreshold::Kind> threshold_kind(const std::string& name) {
  for (const auto& [known, kind] : kinds()) {
    if (known == name) return kind;
  }
  return std::nullopt;
}

bool threshold_takes_amount(DiffThreshold::Kind kind) {
  return kind == Kind::kMemoryIncrease || kind == Kind::kPeakIncrease ||
         kind == Kind::kCommIncrease;
}

std::optional<double> percent_change(int64_t old_value, int64_t new_value) {
  if (old_value == 0) return std::nullopt;
  return 100.0 * static_cast<double>(new_value - old_value) / static_cast<double>(old_value);
}

std::vector<ThresholdResult> check_thresholds(const PlanDiff& diff,
                                              const std::vector<DiffThreshold>& thresholds) {
  std::vector<ThresholdResult> results;
  for (const DiffThreshold& threshold : thresholds) {
    ThresholdResult result = evaluate(diff, threshold);
    result.threshold = threshold.text;
    results.push_back(result);
  }
  return results;
}

}  // namespace mfsdp::schema
