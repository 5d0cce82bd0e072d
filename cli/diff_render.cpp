// `mfsdp diff`'s three renderings: text and markdown here, over the sections they share
// (cli/diff_view.h), and JSON (cli/diff_json.cpp).
#include "cli/diff_render.h"

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/diff_view.h"

namespace mfsdp::cli {
namespace {

using diff_view::kMaxLines;
using diff_view::kShownWhenCut;
using diff_view::PlanDiff;
using diff_view::Row;
using diff_view::Section;
using diff_view::Style;

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

}  // namespace

nlohmann::ordered_json diff_json(const DiffReport& report) {
  return diff_view::json_document(report);
}

std::string render_diff(const DiffReport& report, DiffFormat format, bool color) {
  switch (format) {
    case DiffFormat::kJson:
      return diff_json(report).dump(2) + "\n";
    case DiffFormat::kMarkdown:
      return render_markdown(report, Style(true, false));
    case DiffFormat::kText:
      break;
  }
  return render_text(report, Style(false, color));
}

}  // namespace mfsdp::cli
