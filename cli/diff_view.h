#pragma once
// What the text and markdown renderings of `mfsdp diff` share (cli/diff_render.h): one walk
// over the diff in which each category becomes a section of lines (or rows, for memory and
// communication), and a Style that decides how names, signs and tables look. The line makers
// are in diff_lines.cpp, the walk and the summary in diff_sections.cpp, the JSON rendering
// (which lists everything, unstyled) in diff_json.cpp. Internal to the CLI.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "cli/diff_render.h"
#include "schema/plan_diff.h"
#include "schema/plan_diff_threshold.h"

namespace mfsdp::cli::diff_view {

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

// Lines of one change each (diff_lines.cpp).
std::string plural(int64_t n, const char* one, const char* many);
std::string percent_text(int64_t old_value, int64_t new_value);
std::string params_text(const Style& style, const std::vector<std::string>& params, int64_t bytes);
std::string unit_line(const Style& style, const UnitChange& change);
std::string update_line(const Style& style, const schema::UnitUpdate& update);
std::string order_line(const Style& style, const schema::OrderMove& move);
std::string field_line(const Style& style, const schema::FieldChange& change, bool strip);
std::string threshold_line(const Style& style, const schema::ThresholdResult& result);
void add_schedule(const Style& style, const PlanDiff& diff, Section& section);
void add_quantities(const Style& style, const PlanDiff& diff, const char* prefix, Section& section,
                    const std::string& total_label, int64_t old_total, int64_t new_total);
void add_diagnostics(const Style& style, const PlanDiff& diff, Section& section);

// The walk (diff_sections.cpp): every category's section, the one-line summary, the ignore
// rules in effect.
std::vector<Section> sections(const Style& style, const PlanDiff& diff);
std::string summary(const Style& style, const PlanDiff& diff);
std::string ignored_text(const Style& style, const PlanDiff& diff);

// The JSON rendering (diff_json.cpp).
nlohmann::ordered_json json_document(const DiffReport& report);

}  // namespace mfsdp::cli::diff_view
