// Text and markdown share one walk over the diff: each category becomes a section of lines (or
// rows, for memory and communication), and a Style decides how names, signs and tables look.
#include "cli/diff_render.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli/byte_size.h"

namespace mfsdp::cli {
namespace {

using nlohmann::ordered_json;
using schema::DiagnosticChange;
using schema::PlanDiff;
using schema::UnitChange;

// A long section keeps its first lines; --format json lists everything.
constexpr size_t kMaxLines = 25;
constexpr size_t kShownWhenCut = 20;

using Row = std::array<std::string, 4>;  // what, old, new, change

struct Section {
  std::string title;
  std::vector<std::string> lines;
  std::vector<Row> rows;
};

class Style {
 public:
  Style(bool markdown, bool color) : markdown_(markdown), color_(color && !markdown) {}

  // A unit, parameter, field or schedule point name.
  std::string name(const std::string& s) const { return markdown_ ? "`" + s + "`" : s; }
  // Free text such as a diagnostic message: in markdown, '<root>' must not become a tag.
  std::string text(const std::string& s) const {
    if (!markdown_) return s;
    std::string out;
    for (char c : s) {
      if (c == '<') {
        out += "&lt;";
      } else if (c == '>') {
        out += "&gt;";
      } else if (c == '|' || c == '*' || c == '_' || c == '`') {
        out += std::string("\\") + c;
      } else {
        out += c;
      }
    }
    return out;
  }
  // A value from the plan: "pre_forward <root>", [a, b], 2.
  std::string value(const std::string& s) const {
    const bool number = !s.empty() && s.find_first_not_of("-0123456789") == std::string::npos;
    return markdown_ && !number ? "`" + s + "`" : s;
  }
  std::string added(const std::string& s) const { return mark("+", "32", s); }
  std::string removed(const std::string& s) const { return mark("-", "31", s); }
  std::string changed(const std::string& s) const { return mark("~", "33", s); }
  std::string bold(const std::string& s) const {
    if (markdown_) return "**" + s + "**";
    return color_ ? "\x1b[1m" + s + "\x1b[0m" : s;
  }
  std::string good(const std::string& s) const { return paint("32", s); }
  std::string bad(const std::string& s) const { return paint("31", s); }

 private:
  std::string paint(const char* code, const std::string& s) const {
    return color_ ? std::string("\x1b[") + code + "m" + s + "\x1b[0m" : s;
  }
  std::string mark(const char* sign, const char* code, const std::string& s) const {
    if (markdown_) return std::string("**") + sign + "** " + s;
    return paint(code, sign) + " " + s;
  }

  bool markdown_;
  bool color_;
};

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

std::string render_text(const DiffReport& report, const Style& style) {
  const PlanDiff& diff = report.diff;
  std::string out;
  if (!diff.empty()) {
    out += style.bold("mfsdp diff " + report.old_path + " → " + report.new_path) + "\n";
    out += "summary: " + summary(style, diff) + "\n";
    for (const Section& section : sections(style, diff)) {
      out += style.bold(section.title) + "\n";
      size_t width[3] = {0, 0, 0};
      for (const Row& row : section.rows) {
        for (size_t i = 0; i < 3; ++i) width[i] = std::max(width[i], row[i].size());
      }
      for (const Row& row : section.rows) {
        out += "  " + row[0] + std::string(width[0] - row[0].size() + 2, ' ') +
               std::string(width[1] - row[1].size(), ' ') + row[1] + " → " + row[2] +
               std::string(width[2] - row[2].size() + 2, ' ') + row[3] + "\n";
      }
      const size_t n = section.lines.size();
      const size_t shown = n > kMaxLines ? kShownWhenCut : n;
      for (size_t i = 0; i < shown; ++i) out += "  " + section.lines[i] + "\n";
      if (shown < n) {
        out += "  ... " + std::to_string(n - shown) + " more (--format json lists them all)\n";
      }
    }
  }
  if (!report.thresholds.empty()) {
    out += style.bold("fail-on") + "\n";
    for (const auto& result : report.thresholds) {
      out += "  " + threshold_line(style, result) + "\n";
    }
  }
  return out;
}

std::string render_markdown(const DiffReport& report, const Style& style) {
  const PlanDiff& diff = report.diff;
  std::string out = "### mfsdp plan diff\n\n";
  out += style.name(report.old_path) + " → " + style.name(report.new_path) + ": ";
  if (diff.empty()) {
    out += "no changes";
  } else {
    out += summary(style, diff);
  }
  if (!diff.ignored.empty()) out += " (ignoring " + ignored_text(style, diff) + ")";
  out += "\n";
  if (!diff.empty()) {
    for (const Section& section : sections(style, diff)) {
      out += "\n#### " + section.title + "\n\n";
      if (!section.rows.empty()) {
        out += "| | old | new | change |\n|---|---:|---:|---:|\n";
        for (const Row& row : section.rows) {
          out += "| " + row[0] + " | " + row[1] + " | " + row[2] + " | " + row[3] + " |\n";
        }
        if (!section.lines.empty()) out += "\n";
      }
      const size_t n = section.lines.size();
      const size_t shown = n > kMaxLines ? kShownWhenCut : n;
      for (size_t i = 0; i < shown; ++i) out += "- " + section.lines[i] + "\n";
      if (shown < n) {
        out += "- ... " + std::to_string(n - shown) + " more (`--format json` lists them all)\n";
      }
    }
  }
  if (!report.thresholds.empty()) {
    out += "\n#### Fail-on\n\n";
    for (const auto& result : report.thresholds) {
      out += "- " + threshold_line(style, result) + "\n";
    }
  }
  return out;
}

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

std::string render_json(const DiffReport& report) {
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
  return doc.dump(2) + "\n";
}

}  // namespace

std::string render_diff(const DiffReport& report, DiffFormat format, bool color) {
  switch (format) {
    case DiffFormat::kJson:
      return render_json(report);
    case DiffFormat::kMarkdown:
      return render_markdown(report, Style(true, false));
    case DiffFormat::kText:
      break;
  }
  return render_text(report, Style(false, color));
}

}  // namespace mfsdp::cli
