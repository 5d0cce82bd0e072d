// `mfsdp diff --format json`: every change listed, unstyled (docs/cli.md#mfsdp-diff).
#include "cli/diff_view.h"

#include <nlohmann/json.hpp>

namespace mfsdp::cli::diff_view {
namespace {

using nlohmann::ordered_json;

ordered_json percent_json(int64_t a, int64_t b) {
  const auto percent = schema::percent_change(a, b);
  if (!percent) return nullptr;
  return static_cast<double>(static_cast<int64_t>(*percent * 10.0 + (*percent < 0 ? -0.5 : 0.5))) /
         10.0;
}

ordered_json value_json(const std::string& text) {
  if (text.empty()) return nullptr;
  const auto parsed = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? ordered_json(text) : parsed;
}

ordered_json field_json(const schema::FieldChange& change) {
  return {{"field", change.field},
          {"old", value_json(change.old_value)},
          {"new", value_json(change.new_value)}};
}

ordered_json flow_json(const schema::ParamFlow& flow) {
  return {{"unit", flow.unit.empty() ? ordered_json(nullptr) : ordered_json(flow.unit)},
          {"kept", flow.kept},
          {"parameters", flow.params},
          {"numel", flow.numel},
          {"bytes", flow.bytes}};
}

ordered_json totals_json(int64_t a, int64_t b) {
  return {{"old", a}, {"new", b}, {"delta", b - a}, {"percent", percent_json(a, b)}};
}

}  // namespace

ordered_json json_document(const DiffReport& report) {
  const PlanDiff& diff = report.diff;
  ordered_json doc;
  doc["old"] = report.old_path;
  doc["new"] = report.new_path;
  doc["same"] = diff.empty();
  doc["ignored"] = diff.ignored;
  ordered_json fields = ordered_json::array();
  for (const auto& change : diff.fields) fields.push_back(field_json(change));
  doc["fields"] = fields;
  ordered_json units = ordered_json::array();
  for (const auto& change : diff.units) {
    ordered_json u = {{"change", schema::unit_change_kind_name(change.kind)},
                      {"unit", change.name}};
    if (change.kind == UnitChange::Kind::kRenamed) u["old_name"] = change.old_name;
    u["type"] = change.type;
    u["parameters"] = change.params;
    u["numel"] = change.numel;
    ordered_json flows = ordered_json::array();
    for (const auto& flow : change.flows) flows.push_back(flow_json(flow));
    const bool inbound =
        change.kind == UnitChange::Kind::kAdded || change.kind == UnitChange::Kind::kMerged;
    u[inbound ? "from" : "to"] = flows;
    units.push_back(u);
  }
  doc["units"] = units;
  ordered_json moves = ordered_json::array();
  for (const auto& move : diff.moves) {
    moves.push_back({{"from", move.from.empty() ? ordered_json(nullptr) : ordered_json(move.from)},
                     {"to", move.to.empty() ? ordered_json(nullptr) : ordered_json(move.to)},
                     {"parameters", move.params},
                     {"numel", move.numel},
                     {"bytes", move.bytes}});
  }
  doc["ownership"] = moves;
  ordered_json updates = ordered_json::array();
  for (const auto& update : diff.updates) {
    ordered_json u = {{"unit", update.name}};
    ordered_json f = ordered_json::array();
    for (const auto& change : update.fields) f.push_back(field_json(change));
    u["fields"] = f;
    ordered_json layout = ordered_json::array();
    for (const auto& change : update.layout) {
      layout.push_back({{"subject", change.subject},
                        {"what", change.what},
                        {"old", value_json(change.old_value)},
                        {"new", value_json(change.new_value)}});
    }
    u["layout"] = layout;
    updates.push_back(u);
  }
  doc["unit_updates"] = updates;
  ordered_json orders = ordered_json::array();
  for (const auto& move : diff.orders) {
    const auto position = [](int64_t p) { return p ? ordered_json(p) : ordered_json(nullptr); };
    orders.push_back({{"order", move.order},
                      {"unit", move.unit},
                      {"old_position", position(move.old_position)},
                      {"new_position", position(move.new_position)}});
  }
  doc["orders"] = orders;
  ordered_json prefetch = ordered_json::array();
  for (const auto& change : diff.prefetch) {
    const auto point = [](const std::string& p) {
      return p.empty() ? ordered_json(nullptr) : ordered_json(p);
    };
    prefetch.push_back({{"unit", change.unit},
                        {"phase", change.phase},
                        {"index", change.index},
                        {"old_point", point(change.old_point)},
                        {"new_point", point(change.new_point)}});
  }
  doc["prefetch"] = prefetch;
  ordered_json schedule = ordered_json::array();
  for (const auto& change : diff.schedule) {
    schedule.push_back({{"point", change.point},
                        {"what", change.what},
                        {"old", value_json(change.old_value)},
                        {"new", value_json(change.new_value)}});
  }
  doc["schedule"] = schedule;
  ordered_json quantities = ordered_json::array();
  for (const auto& q : diff.quantities) {
    ordered_json item = {{"field", q.field}};
    item.update(totals_json(q.old_value, q.new_value));
    quantities.push_back(item);
  }
  doc["quantities"] = quantities;
  ordered_json diagnostics = ordered_json::array();
  for (const auto& change : diff.diagnostics) {
    const char* kind = change.kind == DiagnosticChange::Kind::kAdded     ? "added"
                       : change.kind == DiagnosticChange::Kind::kRemoved ? "removed"
                                                                         : "changed";
    ordered_json d = {{"change", kind},
                      {"severity", change.diagnostic.severity},
                      {"code", change.diagnostic.code},
                      {"where", change.diagnostic.where},
                      {"message", change.diagnostic.message}};
    if (change.kind == DiagnosticChange::Kind::kChanged) d["old_message"] = change.old_message;
    diagnostics.push_back(d);
  }
  doc["diagnostics"] = diagnostics;
  doc["totals"] = {{"per_rank_bytes",
                    totals_json(diff.old_totals.per_rank_bytes, diff.new_totals.per_rank_bytes)},
                   {"peak_unsharded_bytes", totals_json(diff.old_totals.peak_unsharded_bytes,
                                                        diff.new_totals.peak_unsharded_bytes)},
                   {"communication_bytes", totals_json(diff.old_totals.communication_bytes,
                                                       diff.new_totals.communication_bytes)}};
  ordered_json fail_on = ordered_json::array();
  for (const auto& result : report.thresholds) {
    ordered_json r = {
        {"threshold", result.threshold}, {"tripped", result.tripped}, {"measure", result.measure}};
    if (result.is_increase) {
      r["old"] = result.old_value;
      r["new"] = result.new_value;
      r["percent"] = percent_json(result.old_value, result.new_value);
    } else {
      r["changes"] = result.changes;
    }
    fail_on.push_back(r);
  }
  doc["fail_on"] = fail_on;
  return doc;
}

}  // namespace mfsdp::cli::diff_view
