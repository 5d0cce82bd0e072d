// The walk over a plan diff that text and markdown share, and its one-line summary
// (cli/diff_view.h).
#include "cli/diff_view.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>
#include <utility>

#include "cli/byte_size.h"

namespace mfsdp::cli::diff_view {

std::vector<Section> sections(const Style& style, const PlanDiff& diff) {
  std::vector<Section> out;
  const auto section = [&out](const std::string& title) -> Section& {
    out.push_back({title, {}, {}});
    return out.back();
  };
  const auto fields_under = [&](const std::vector<std::string>& prefixes, Section& s, bool strip) {
    for (const auto& change : diff.fields) {
      for (const auto& prefix : prefixes) {
        if (change.field.rfind(prefix, 0) == 0) s.lines.push_back(field_line(style, change, strip));
      }
    }
  };
  fields_under({"generator", "model."}, section("Model"), false);
  fields_under({"mesh."}, section("Mesh"), true);
  fields_under({"policy.", "streams"}, section("Policy"), true);

  Section& units = section("Units");
  for (const auto& change : diff.units) units.lines.push_back(unit_line(style, change));
  for (const auto& move : diff.moves) {
    const std::string from = move.from.empty() ? "(new to the model)" : style.name(move.from);
    const std::string to = move.to.empty() ? "(gone from the model)" : style.name(move.to);
    units.lines.push_back(style.changed(params_text(style, move.params, move.bytes) +
                                        " moved: " + from + " → " + to));
  }
  for (const auto& update : diff.updates) units.lines.push_back(update_line(style, update));

  Section& orders = section("Orders");
  fields_under({"roots", "forward_order", "backward_order"}, orders, false);
  for (const auto& move : diff.orders) orders.lines.push_back(order_line(style, move));

  Section& schedule = section("Schedule");
  add_schedule(style, diff, schedule);

  Section& memory = section("Memory (per rank)");
  add_quantities(style, diff, "memory.", memory, "total (params + grads + slots)",
                 diff.old_totals.per_rank_bytes, diff.new_totals.per_rank_bytes);
  fields_under({"memory."}, memory, true);
  Section& communication = section("Communication (one microbatch)");
  add_quantities(style, diff, "communication.", communication, "total (all collectives)",
                 diff.old_totals.communication_bytes, diff.new_totals.communication_bytes);

  Section& diagnostics = section("Diagnostics");
  add_diagnostics(style, diff, diagnostics);
  fields_under({"trace."}, section("Trace"), true);

  Section& other = section("Other");
  for (const auto& change : diff.fields) {
    static const char* known[] = {"generator", "model.", "mesh.",         "policy.",
                                  "streams",   "roots",  "forward_order", "backward_order",
                                  "memory.",   "trace."};
    if (std::none_of(std::begin(known), std::end(known),
                     [&](const char* p) { return change.field.rfind(p, 0) == 0; })) {
      other.lines.push_back(field_line(style, change, false));
    }
  }
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const Section& s) { return s.lines.empty() && s.rows.empty(); }),
            out.end());
  return out;
}

// "2 units added; 12 parameters moved; per-rank memory +18.0%; ..."
std::string summary(const Style& style, const PlanDiff& diff) {
  std::vector<std::string> parts;
  std::map<UnitChange::Kind, int64_t> kinds;
  for (const auto& change : diff.units) ++kinds[change.kind];
  for (const auto& [kind, n] : kinds) {
    parts.push_back(plural(n, "unit ", "units ") + schema::unit_change_kind_name(kind));
  }
  int64_t moved = 0;
  for (const auto& move : diff.moves) moved += static_cast<int64_t>(move.params.size());
  if (moved) parts.push_back(plural(moved, "parameter", "parameters") + " moved");
  const auto count_fields = [&](const char* prefix) {
    return std::count_if(diff.fields.begin(), diff.fields.end(),
                         [&](const auto& f) { return f.field.rfind(prefix, 0) == 0; });
  };
  if (count_fields("model.")) parts.push_back("model changed");
  if (count_fields("mesh.")) parts.push_back("mesh changed");
  if (count_fields("policy.")) parts.push_back("policy changed");
  if (count_fields("trace.")) parts.push_back("trace changed");
  int64_t layout = 0, attributes = 0;
  for (const auto& update : diff.updates) {
    layout += !update.layout.empty();
    attributes += update.layout.empty();
  }
  if (layout) parts.push_back("layout of " + plural(layout, "unit", "units") + " changed");
  if (attributes) parts.push_back(plural(attributes, "unit", "units") + " changed");
  const int64_t orders = static_cast<int64_t>(diff.orders.size()) + count_fields("roots") +
                         count_fields("forward_order") + count_fields("backward_order");
  if (orders) parts.push_back(plural(orders, "order change", "order changes"));
  // Live bytes follow the unit sizes and the prefetch; they count once.
  int64_t schedule = static_cast<int64_t>(diff.prefetch.size());
  bool live_bytes = false;
  for (const auto& change : diff.schedule) {
    if (change.what == "unsharded_bytes") {
      live_bytes = true;
    } else {
      ++schedule;
    }
  }
  schedule += live_bytes;
  if (schedule) parts.push_back(plural(schedule, "schedule change", "schedule changes"));
  // Totals of the quantities shown; an ignored memory or communication stays out.
  const auto shown = [&](const char* field) {
    return std::any_of(diff.quantities.begin(), diff.quantities.end(),
                       [&](const auto& q) { return q.field.rfind(field, 0) == 0; });
  };
  const auto& a = diff.old_totals;
  const auto& b = diff.new_totals;
  if (a.per_rank_bytes != b.per_rank_bytes && shown("memory.")) {
    parts.push_back(
        style.bold("per-rank memory " + percent_text(a.per_rank_bytes, b.per_rank_bytes)));
  }
  if (a.peak_unsharded_bytes != b.peak_unsharded_bytes && shown("memory.peak_unsharded_bytes")) {
    parts.push_back("peak unsharded " +
                    percent_text(a.peak_unsharded_bytes, b.peak_unsharded_bytes));
  }
  if (a.communication_bytes != b.communication_bytes && shown("communication.")) {
    parts.push_back("communication " + percent_text(a.communication_bytes, b.communication_bytes));
  }
  std::map<DiagnosticChange::Kind, int64_t> diagnostics;
  for (const auto& change : diff.diagnostics) ++diagnostics[change.kind];
  for (const auto& [kind, n] : diagnostics) {
    const char* what = kind == DiagnosticChange::Kind::kAdded     ? " added"
                       : kind == DiagnosticChange::Kind::kRemoved ? " removed"
                                                                  : " changed";
    parts.push_back(plural(n, "diagnostic", "diagnostics") + what);
  }
  if (parts.empty()) parts.push_back("other changes");
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : "; ") + part;
  return out;
}

std::string ignored_text(const Style& style, const PlanDiff& diff) {
  std::string out;
  for (const auto& field : diff.ignored) out += (out.empty() ? "" : ", ") + style.name(field);
  return out;
}

}  // namespace mfsdp::cli::diff_view
