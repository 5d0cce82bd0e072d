// The line makers of `mfsdp diff`'s text and markdown: one change each (cli/diff_view.h).
#include "cli/diff_view.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli/byte_size.h"

namespace mfsdp::cli::diff_view {

using nlohmann::ordered_json;

std::string plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string signed_bytes(int64_t delta) {
  return (delta > 0 ? "+" : "") + format_bytes(delta);
}

std::string percent_text(int64_t old_value, int64_t new_value) {
  const auto percent = schema::percent_change(old_value, new_value);
  if (!percent) return "new";
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f%%", *percent);
  return text;
}

std::string short_type(const std::string& type) {
  return type.substr(type.rfind('.') + 1);
}

// Hashes are 64 hex digits; 12 tell them apart for a reader.
std::string short_value(const std::string& json_text) {
  if (json_text.size() == 66 && json_text.front() == '"') return json_text.substr(0, 13) + "…\"";
  return json_text;
}

// Two sizes that differ must not print the same: "2.1 KiB → 2.1 KiB" becomes "2176 B → 2208 B".
std::pair<std::string, std::string> sizes(int64_t a, int64_t b) {
  if (format_bytes(a) == format_bytes(b)) {
    return {std::to_string(a) + " B", std::to_string(b) + " B"};
  }
  return {format_bytes(a), format_bytes(b)};
}

bool is_integer(const std::string& text) {
  return !text.empty() && text.find_first_not_of("-0123456789") == std::string::npos;
}

// A JSON value for a reader: arrays of names without quotes, hashes shortened.
std::string value_text(const std::string& json_text) {
  if (json_text.empty()) return "(none)";
  const auto value = ordered_json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (value.is_array() &&
      std::all_of(value.begin(), value.end(), [](const auto& v) { return v.is_string(); })) {
    std::string out;
    for (const auto& item : value) out += (out.empty() ? "" : ", ") + item.get<std::string>();
    return "[" + out + "]";
  }
  return short_value(json_text);
}

std::string change_text(const Style& style, const std::string& field, const std::string& a,
                        const std::string& b) {
  const bool bytes = field.size() > 6 && field.compare(field.size() - 6, 6, "_bytes") == 0;
  if (bytes && is_integer(a) && is_integer(b)) {
    const auto [x, y] = sizes(std::stoll(a), std::stoll(b));
    return x + " → " + y;
  }
  return style.value(value_text(a)) + " → " + style.value(value_text(b));
}

// "layers.7.* (12 parameters, 49.6 KiB)", "wte.weight (32.0 KiB)", "a, b, c and 4 more (...)".
std::string params_text(const Style& style, const std::vector<std::string>& params, int64_t bytes) {
  const std::string size = format_bytes(bytes);
  if (params.size() == 1) return style.name(params[0]) + " (" + size + ")";
  std::string prefix = params.empty() ? "" : params[0];
  for (const std::string& p : params) {
    size_t n = 0;
    while (n < prefix.size() && n < p.size() && prefix[n] == p[n]) ++n;
    prefix = prefix.substr(0, n);
  }
  prefix = prefix.substr(0, prefix.rfind('.') == std::string::npos ? 0 : prefix.rfind('.') + 1);
  const std::string count = plural(static_cast<int64_t>(params.size()), "parameter", "parameters");
  if (!prefix.empty()) return style.name(prefix + "*") + " (" + count + ", " + size + ")";
  std::string names;
  for (size_t i = 0; i < params.size() && i < 3; ++i) {
    names += (i ? ", " : "") + style.name(params[i]);
  }
  if (params.size() > 3) names += " and " + std::to_string(params.size() - 3) + " more";
  return names + " (" + count + ", " + size + ")";
}

std::string flow_text(const Style& style, const schema::ParamFlow& flow, const char* absent) {
  std::string unit = flow.unit.empty() ? absent : style.name(flow.unit);
  return unit + ": " + params_text(style, flow.params, flow.bytes);
}

std::string unit_line(const Style& style, const UnitChange& change) {
  const std::string type = " (" + style.name(short_type(change.type)) + ")";
  std::string line;
  const auto join_flows = [&](const char* absent) {
    std::string out;
    for (const auto& flow : change.flows) {
      out += (out.empty() ? "" : "; ") + flow_text(style, flow, absent);
    }
    return out;
  };
  switch (change.kind) {
    case UnitChange::Kind::kAdded: {
      line = style.added(style.name(change.name) + type + ": new unit");
      if (change.flows.empty()) return line + ", owns no parameters";
      const auto& flow = change.flows.front();
      if (flow.unit.empty()) {
        return line + ", owns new parameters " + params_text(style, flow.params, flow.bytes);
      }
      return line + (flow.kept ? ", split off " : ", takes from ") + flow_text(style, flow, "");
    }
    case UnitChange::Kind::kRemoved: {
      line = style.removed(style.name(change.name) + type + ": removed");
      if (change.flows.empty()) return line + ", owned no parameters";
      const auto& flow = change.flows.front();
      if (flow.unit.empty()) {
        return line + " with its parameters " + params_text(style, flow.params, flow.bytes);
      }
      return line + (flow.kept ? ", merged into " : ", its parameters went to ") +
             flow_text(style, flow, "");
    }
    case UnitChange::Kind::kRenamed:
      return style.changed(style.name(change.old_name) + " → " + style.name(change.name) + type +
                           ": renamed, same " + plural(change.params, "parameter", "parameters"));
    case UnitChange::Kind::kSplit:
      return style.removed(style.name(change.name) + type + ": split into " +
                           join_flows("(gone from the model)"));
    case UnitChange::Kind::kMerged:
      return style.added(style.name(change.name) + type + ": merged from " +
                         join_flows("(new to the model)"));
  }
  return line;
}

// One unit's layout changes on one line; a change repeated over many parameters (offsets after
// an alignment change) is told once with an example.
std::string layout_text(const Style& style, const std::vector<schema::LayoutChange>& layout) {
  static const std::vector<std::string> per_param = {"dtype", "requires_grad", "shape", "offset",
                                                     "aliases"};
  std::map<std::string, int> count;
  for (const auto& change : layout) ++count[change.what];
  std::map<std::string, bool> told;
  std::string out;
  const auto add = [&out](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  for (const auto& change : layout) {
    const std::string values = style.value(value_text(change.old_value)) + " → " +
                               style.value(value_text(change.new_value));
    const bool repeated =
        count[change.what] > 2 && std::count(per_param.begin(), per_param.end(), change.what) > 0;
    if (repeated) {
      if (told[change.what]) continue;
      told[change.what] = true;
      add(change.what + " of " + std::to_string(count[change.what]) + " parameters (e.g. " +
          style.name(change.subject) + " " + values + ")");
    } else if (change.what == "group") {
      add(change.subject + " group " +
          (change.old_value.empty() ? "added (" + change.new_value + " elements)"
                                    : "removed (" + change.old_value + " elements)"));
    } else {
      add(style.name(change.subject) + " " + change.what + " " + values);
    }
  }
  return out;
}

std::string update_line(const Style& style, const schema::UnitUpdate& update) {
  std::string text;
  for (const auto& field : update.fields) {
    const std::string key = field.field.substr(field.field.find('.') + 1);
    text += (text.empty() ? "" : ", ") + key + " " +
            change_text(style, field.field, field.old_value, field.new_value);
  }
  const std::string layout = layout_text(style, update.layout);
  if (!layout.empty()) text += (text.empty() ? "layout: " : "; layout: ") + layout;
  return style.changed(style.name(update.name) + ": " + text);
}

std::string order_line(const Style& style, const schema::OrderMove& move) {
  const std::string order = move.order.substr(0, move.order.find('_'));
  const std::string unit = style.name(move.unit) + ": " + order + " position ";
  if (move.old_position == 0) {
    return style.added(unit + std::to_string(move.new_position) + " (new)");
  }
  if (move.new_position == 0) {
    return style.removed(unit + std::to_string(move.old_position) + " (gone)");
  }
  return style.changed(unit + std::to_string(move.old_position) + " → " +
                       std::to_string(move.new_position));
}

std::string point_text(const Style& style, const std::string& point) {
  return point.empty() ? "(none)" : style.name(point);
}

void add_schedule(const Style& style, const PlanDiff& diff, Section& section) {
  for (const auto& change : diff.prefetch) {
    std::string which = change.phase + " all-gather";
    if (change.index > 0) which += " #" + std::to_string(change.index + 1);
    section.lines.push_back(style.changed(style.name(change.unit) + ": " + which + " issued at " +
                                          point_text(style, change.old_point) + " → " +
                                          point_text(style, change.new_point)));
  }
  int live = 0;
  const schema::ScheduleChange* first_live = nullptr;
  for (const auto& change : diff.schedule) {
    if (change.what == "unsharded_bytes") {
      if (!first_live) first_live = &change;
      ++live;
    } else if (change.what == "entry") {
      section.lines.push_back(change.old_value.empty()
                                  ? style.added(style.name(change.point) + ": new entry")
                                  : style.removed(style.name(change.point) + ": entry gone"));
    } else {
      section.lines.push_back(style.changed(style.name(change.point) + ": " + change.what + " " +
                                            style.value(value_text(change.old_value)) + " → " +
                                            style.value(value_text(change.new_value))));
    }
  }
  if (first_live) {
    const auto [a, b] = sizes(std::stoll(first_live->old_value), std::stoll(first_live->new_value));
    section.lines.push_back(style.changed("live unsharded bytes differ at " +
                                          plural(live, "point", "points") + ", first at " +
                                          style.name(first_live->point) + ": " + a + " → " + b));
  }
}

Row quantity_row(const Style& style, const std::string& label, int64_t a, int64_t b, bool bytes) {
  const auto [x, y] = bytes ? sizes(a, b) : std::pair(std::to_string(a), std::to_string(b));
  std::string change = bytes ? signed_bytes(b - a) : (b > a ? "+" : "") + std::to_string(b - a);
  change += " (" + percent_text(a, b) + ")";
  change = b > a ? style.bad(change) : style.good(change);
  return {label, x, y, change};
}

void add_quantities(const Style& style, const PlanDiff& diff, const char* prefix, Section& section,
                    const std::string& total_label, int64_t old_total, int64_t new_total) {
  bool any = false;
  for (const auto& q : diff.quantities) {
    if (q.field.rfind(prefix, 0) != 0) continue;
    if (!any && old_total != new_total) {
      section.rows.push_back(quantity_row(style, total_label, old_total, new_total, true));
    }
    any = true;
    section.rows.push_back(quantity_row(style, style.name(q.field.substr(q.field.find('.') + 1)),
                                        q.old_value, q.new_value, q.is_bytes()));
  }
}

std::string field_line(const Style& style, const schema::FieldChange& change, bool strip) {
  const std::string label = strip && change.field.find('.') != std::string::npos
                                ? change.field.substr(change.field.find('.') + 1)
                                : change.field;
  return style.changed(style.name(label) + " " +
                       change_text(style, change.field, change.old_value, change.new_value));
}

std::string diagnostic_line(const Style& style, const DiagnosticChange& change) {
  const auto& d = change.diagnostic;
  std::string head = d.severity + " " + style.name(d.code);
  if (!d.where.empty()) head += " (" + style.name(d.where) + ")";
  switch (change.kind) {
    case DiagnosticChange::Kind::kAdded:
      return style.added(head + ": " + style.text(d.message));
    case DiagnosticChange::Kind::kRemoved:
      return style.removed(head + ": " + style.text(d.message));
    case DiagnosticChange::Kind::kChanged:
      return style.changed(head + ": message now: " + style.text(d.message));
  }
  return head;
}

// Many diagnostics of one code (a hoisted ModuleList: one per parameter) read as one line.
void add_diagnostics(const Style& style, const PlanDiff& diff, Section& section) {
  using Key = std::tuple<DiagnosticChange::Kind, std::string, std::string>;
  std::map<Key, std::vector<const DiagnosticChange*>> groups;
  for (const auto& change : diff.diagnostics) {
    groups[{change.kind, change.diagnostic.severity, change.diagnostic.code}].push_back(&change);
  }
  for (const auto& change : diff.diagnostics) {
    const auto& group =
        groups.at({change.kind, change.diagnostic.severity, change.diagnostic.code});
    if (group.size() <= 3) {
      section.lines.push_back(diagnostic_line(style, change));
      continue;
    }
    if (group.front() != &change) continue;
    std::string where;
    for (size_t i = 0; i < 3; ++i)
      where += (i ? ", " : "") + style.name(group[i]->diagnostic.where);
    where += " and " + std::to_string(group.size() - 3) + " more";
    DiagnosticChange first = change;
    first.diagnostic.where.clear();
    first.diagnostic.severity = std::to_string(group.size()) + " × " + change.diagnostic.severity;
    first.diagnostic.message = "e.g. " + change.diagnostic.message;
    std::string line = diagnostic_line(style, first);
    const std::string code = style.name(change.diagnostic.code);
    line.insert(line.find(code) + code.size(), " (" + where + ")");
    section.lines.push_back(line);
  }
}

std::string threshold_line(const Style& style, const schema::ThresholdResult& result) {
  std::string detail;
  if (result.is_increase) {
    detail = result.measure + " " + format_bytes(result.old_value) + " → " +
             format_bytes(result.new_value) + " (" +
             percent_text(result.old_value, result.new_value) + ")";
  } else {
    detail = result.measure + ": " + std::to_string(result.changes);
  }
  const std::string verdict = result.tripped ? style.bad(style.bold("FAIL")) : style.good("ok");
  return verdict + " " + style.name(result.threshold) + ": " + style.text(detail);
}

}  // namespace mfsdp::cli::diff_view
