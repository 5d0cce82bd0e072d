// Two plans through what `mfsdp diff` does with them: read both, diff them, check --fail-on
// thresholds and render the text, markdown and JSON reports. Like the CLI, only plans without
// shape problems are diffed (diff does not require check_plan). A plan diffed with itself,
// comparing every field, must show no change, and two plans must show a change exactly when
// they differ.
//
// Input: OLD "\n%%\n" NEW, optionally followed by "\n%%\n" and option lines:
//   fail-on THRESHOLD   as --fail-on (memory-increase=5%, units-changed, ...)
//   ignore FIELD        as --ignore
//   include FIELD       as --include
// Without a separator the input is diffed with itself.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/diff_command.h"
#include "cli/diff_render.h"
#include "schema/error.h"
#include "schema/plan_diff.h"
#include "schema/plan_diff_threshold.h"
#include "schema/plan_json.h"
#include "tests/fuzz/harness.h"

namespace mfsdp::fuzz {
namespace {

const std::string kSeparator = "\n%%\n";

struct DiffInput {
  std::string old_text;
  std::string new_text;
  std::vector<std::string> options;
};

DiffInput split_input(const std::string& text) {
  DiffInput input;
  const size_t first = text.find(kSeparator);
  if (first == std::string::npos) {
    input.old_text = input.new_text = text;
    return input;
  }
  input.old_text = text.substr(0, first);
  const size_t start = first + kSeparator.size();
  const size_t second = text.find(kSeparator, start);
  input.new_text = text.substr(start, second == std::string::npos ? second : second - start);
  if (second == std::string::npos) return input;
  std::string rest = text.substr(second + kSeparator.size());
  for (size_t at = 0; at <= rest.size();) {
    const size_t end = std::min(rest.find('\n', at), rest.size());
    input.options.push_back(rest.substr(at, end - at));
    at = end + 1;
  }
  return input;
}

// The plan as `mfsdp diff` reads it: nullopt where it refuses the file.
std::optional<schema::Plan> read_plan(InputFile& file, const std::string& text) {
  schema::ParseResult parsed = schema::read_plan_file(file.write(text));
  if (!parsed.problems.empty()) return std::nullopt;
  return std::move(parsed.plan);
}

// What the command line would accept; a line the CLI refuses is left out, the rest still run.
void apply_options(const std::vector<std::string>& lines, schema::DiffOptions& options,
                   std::vector<schema::DiffThreshold>& thresholds) {
  const auto& fields = schema::diff_field_names();
  const auto known = [&](const std::string& field) {
    return std::find(fields.begin(), fields.end(), field) != fields.end();
  };
  for (const std::string& line : lines) {
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string flag = line.substr(0, space);
    const std::string value = line.substr(space + 1);
    if (flag == "fail-on") {
      try {
        thresholds.push_back(cli::parse_threshold(value));
      } catch (const Error&) {
      }
    } else if (flag == "ignore" && known(value)) {
      options.ignore.push_back(value);
    } else if (flag == "include" && known(value)) {
      options.include.push_back(value);
    }
  }
}

// Every threshold kind at its most sensitive, so each check runs on every diff.
std::vector<schema::DiffThreshold> every_threshold() {
  std::vector<schema::DiffThreshold> out;
  for (const std::string& name : schema::threshold_names()) {
    schema::DiffThreshold threshold;
    threshold.kind = *schema::threshold_kind(name);
    threshold.text = name;
    if (schema::threshold_takes_amount(threshold.kind)) {
      threshold.percent = 0.0;
      out.push_back(threshold);
      threshold.percent.reset();
      threshold.bytes = 0;
    }
    out.push_back(threshold);
  }
  return out;
}

void check_invariants(const schema::Plan& old_plan, const schema::Plan& new_plan) {
  schema::DiffOptions every_field;
  every_field.ignore.clear();
  if (!schema::diff_plans(old_plan, old_plan, every_field).empty()) {
    finding("a plan diffed with itself (every field compared) shows a change");
  }
  const bool same_bytes = schema::dump_plan(old_plan) == schema::dump_plan(new_plan);
  const bool empty = schema::diff_plans(old_plan, new_plan, every_field).empty();
  if (same_bytes != empty) {
    finding(same_bytes ? "two plans with the same bytes show a change"
                       : "two plans with different bytes show no change (every field compared)");
  }
}

}  // namespace
}  // namespace mfsdp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mfsdp;
  static fuzz::InputFile file;
  fuzz::expect_only_errors([&] {
    const fuzz::DiffInput input =
        fuzz::split_input(std::string(reinterpret_cast<const char*>(data), size));
    schema::DiffOptions options;
    std::vector<schema::DiffThreshold> thresholds;
    fuzz::apply_options(input.options, options, thresholds);
    const auto more = fuzz::every_threshold();
    thresholds.insert(thresholds.end(), more.begin(), more.end());

    const std::optional<schema::Plan> old_plan = fuzz::read_plan(file, input.old_text);
    if (!old_plan) return;
    const std::optional<schema::Plan> new_plan = fuzz::read_plan(file, input.new_text);
    if (!new_plan) return;

    cli::DiffReport report;
    report.old_path = "old.plan.json";
    report.new_path = "new.plan.json";
    report.diff = schema::diff_plans(*old_plan, *new_plan, options);
    report.thresholds = schema::check_thresholds(report.diff, thresholds);
    cli::render_diff(report, cli::DiffFormat::kText, false);
    cli::render_diff(report, cli::DiffFormat::kText, true);
    cli::render_diff(report, cli::DiffFormat::kMarkdown, false);
    cli::render_diff(report, cli::DiffFormat::kJson, false);
    fuzz::check_invariants(*old_plan, *new_plan);
  });
  return 0;
}
