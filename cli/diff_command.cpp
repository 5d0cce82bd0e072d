// `mfsdp diff old.json new.json`: reads both plans, diffs them (schema/plan_diff.h), prints the
// diff and answers with the exit status: like diff(1) without --fail-on, by the thresholds with.
#include "cli/diff_command.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli/byte_size.h"
#include "cli/command_line.h"
#include "cli/diff_render.h"
#include "cli/predict_flags.h"
#include "cli/predict_report.h"
#include "cli/whole_number.h"
#include "schema/error.h"
#include "schema/plan_json.h"
#include "schema/plan_loader.h"

namespace mfsdp::cli {
namespace {

struct DiffFlags {
  std::string old_path;
  std::string new_path;
  std::string format = "text";
  std::string color = "auto";
  std::vector<std::string> ignore;
  std::vector<std::string> include;
  std::vector<std::string> fail_on;
  bool quiet = false;
  PredictFlags prediction;  // with --profile: the predicted step of each plan
};

const char* kExamples = R"(
Examples:
  # What did this change do to the plan?
  mfsdp diff plans/gpt.plan.json /tmp/gpt.plan.json

  # CI: fail only on a regression, still printing the whole diff:
  mfsdp diff main.plan.json pr.plan.json --fail-on memory-increase=5% --fail-on units-changed

  # A pull-request comment, or a report for tools:
  mfsdp diff main.plan.json pr.plan.json --format markdown > plan-diff.md
  mfsdp diff main.plan.json pr.plan.json --format json | jq '.totals.per_rank_bytes.percent'

  # And the predicted step time on a machine (both plans made with --trace-input):
  mfsdp diff main.plan.json pr.plan.json --profile probe.json

  # Also compare the model file's hash (ignored by default), but not the diagnostics:
  mfsdp diff a.json b.json --include model.sha256 --ignore diagnostics

Ignored by default: generator, model.path, model.sha256, trace.times, prediction (--include
FIELD to compare them).
Thresholds: memory-increase=N%|SIZE, peak-increase=N%|SIZE, comm-increase=N%|SIZE, any,
units-changed, ownership-changed, order-changed, layout-changed, schedule-changed,
mesh-changed, policy-changed, model-changed, diagnostics-added[=info|warning|error].
Exit codes: 0 same, 1 different; with --fail-on, 1 only when a threshold trips (else 0);
2 bad flags or an unusable plan file.
)";

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Plans that break a rule can still be compared; their shape must hold (the totals compared
// are checked to add up within 64 bits there).
schema::Plan read_plan(const std::string& path) {
  return schema::load_plan_file(path, schema::PlanCheck::kShape);
}

void check_field_names(const std::vector<std::string>& fields, const char* flag) {
  const auto& known = schema::diff_field_names();
  for (const std::string& field : fields) {
    if (std::find(known.begin(), known.end(), field) == known.end()) {
      fail(ExitCode::kUsage, std::string(flag) + " '" + field +
                                 "' is not a plan field; use one of: " + joined(known));
    }
  }
}

DiffFormat parse_format(const std::string& format) {
  if (format == "text") return DiffFormat::kText;
  if (format == "json") return DiffFormat::kJson;
  if (format == "markdown") return DiffFormat::kMarkdown;
  fail(ExitCode::kUsage, "--format '" + format + "' is not text, json or markdown");
}

bool use_color(const std::string& color) {
  if (color == "always") return true;
  if (color == "never") return false;
  if (color != "auto") {
    fail(ExitCode::kUsage, "--color '" + color + "' is not auto, always or never");
  }
  const char* term = std::getenv("TERM");
  return isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR") &&
         !(term && std::string(term) == "dumb");
}

// The diff's output with the predicted step of both plans: one more line of text or
// markdown, a `prediction` object in JSON.
std::string with_predicted_step(const DiffReport& report, DiffFormat format, bool color,
                                const predict::PlanPrediction& old_p,
                                const predict::PlanPrediction& new_p) {
  const double before = old_p.prediction.step_us / 1000, after = new_p.prediction.step_us / 1000;
  const double percent = before > 0 ? 100 * (after - before) / before : 0;
  if (format == DiffFormat::kJson) {
    nlohmann::ordered_json doc = diff_json(report);
    doc["prediction"] = {{"profile", new_p.profile.name},
                         {"old_step_ms", before},
                         {"new_step_ms", after},
                         {"percent", percent},
                         {"old_exposed_comm_ms", old_p.prediction.exposed_comm_us / 1000},
                         {"new_exposed_comm_ms", new_p.prediction.exposed_comm_us / 1000}};
    return doc.dump(2) + "\n";
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "%.2f ms -> %.2f ms (%+.1f %%), exposed communication %.2f -> %.2f ms", before,
                after, percent, old_p.prediction.exposed_comm_us / 1000,
                new_p.prediction.exposed_comm_us / 1000);
  const std::string what = "predicted step on profile '" + new_p.profile.name + "': " + line;
  const std::string text = render_diff(report, format, color);
  return text + (format == DiffFormat::kMarkdown ? "\n**" + what + "**\n" : what + "\n");
}

void run_diff(const DiffFlags& flags) {
  const DiffFormat format = parse_format(flags.format);
  const bool color = use_color(flags.color);
  check_field_names(flags.ignore, "--ignore");
  check_field_names(flags.include, "--include");
  std::vector<schema::DiffThreshold> thresholds;
  for (const std::string& text : flags.fail_on) thresholds.push_back(parse_threshold(text));

  schema::DiffOptions options;
  options.ignore.insert(options.ignore.end(), flags.ignore.begin(), flags.ignore.end());
  options.include = flags.include;
  DiffReport report;
  report.old_path = flags.old_path;
  report.new_path = flags.new_path;
  const schema::Plan old_plan = read_plan(flags.old_path);
  const schema::Plan new_plan = read_plan(flags.new_path);
  report.diff = schema::diff_plans(old_plan, new_plan, options);
  report.thresholds = schema::check_thresholds(report.diff, thresholds);
  // Predicted before anything is printed, so that a plan that cannot be predicted fails
  // with one line instead of after a diff.
  std::optional<std::pair<predict::PlanPrediction, predict::PlanPrediction>> predicted;
  if (!flags.prediction.profile.empty()) {
    const predict::PredictRequest request = predict_request(flags.prediction);
    const auto predict = [&](const schema::Plan& plan, const std::string& path) {
      try {
        return predict::predict_plan(plan, request);
      } catch (const Error& e) {
        fail(e.code(), path + ": " + e.what());
      }
    };
    predicted.emplace(predict(old_plan, flags.old_path), predict(new_plan, flags.new_path));
  }
  const std::string text =
      predicted ? with_predicted_step(report, format, color, predicted->first, predicted->second)
                : render_diff(report, format, color);
  if (!flags.quiet) std::cout << text << std::flush;
  bool differ = !report.diff.empty();
  if (!thresholds.empty()) {
    differ = std::any_of(report.thresholds.begin(), report.thresholds.end(),
                         [](const auto& r) { return r.tripped; });
  }
  // Differences are an answer, not an error: no "mfsdp: error:" line, only the status.
  if (differ) exit_with(ExitCode::kFindings);
}

}  // namespace

schema::DiffThreshold parse_threshold(const std::string& text) {
  const size_t eq = text.find('=');
  const std::string name = text.substr(0, eq);
  const std::string value = eq == std::string::npos ? "" : text.substr(eq + 1);
  const auto kind = schema::threshold_kind(name);
  if (!kind) {
    fail(ExitCode::kUsage, "--fail-on '" + text + "': unknown threshold; use one of: " +
                               joined(schema::threshold_names()));
  }
  schema::DiffThreshold threshold;
  threshold.kind = *kind;
  threshold.text = text;
  if (schema::threshold_takes_amount(*kind)) {
    const std::string usage = "--fail-on '" + text + "': expected " + name +
                              "=N% (e.g. 5% or 2.5%) or " + name + "=SIZE (e.g. 64MiB)";
    if (value.empty()) fail(ExitCode::kUsage, usage);
    if (value.back() == '%') {
      const std::string number = value.substr(0, value.size() - 1);
      if (number.empty() || number.find_first_not_of("0123456789.") != std::string::npos ||
          number.find('.') != number.rfind('.')) {
        fail(ExitCode::kUsage, usage);
      }
      // "." or more digits than a double holds: the usage, not an internal error.
      errno = 0;
      char* end = nullptr;
      const double percent = std::strtod(number.c_str(), &end);
      if (end != number.c_str() + number.size() || errno == ERANGE || !std::isfinite(percent)) {
        fail(ExitCode::kUsage, usage);
      }
      threshold.percent = percent;
    } else {
      // A bare number could mean percent or bytes: ask for one.
      if (value.find_first_not_of("0123456789") == std::string::npos) fail(ExitCode::kUsage, usage);
      threshold.bytes = parse_bytes(value, "--fail-on " + name);
    }
  } else if (*kind == schema::DiffThreshold::Kind::kDiagnosticsAdded) {
    if (!value.empty() && value != "info" && value != "warning" && value != "error") {
      fail(ExitCode::kUsage, "--fail-on '" + text + "': severity must be info, warning or error");
    }
    if (!value.empty()) threshold.min_severity = value;
  } else if (eq != std::string::npos) {
    fail(ExitCode::kUsage, "--fail-on '" + text + "': " + name + " takes no value");
  }
  return threshold;
}

void add_diff_command(CLI::App& app) {
  auto flags = std::make_shared<DiffFlags>();
  CLI::App* cmd = app.add_subcommand(
      "diff", "Show what changed between two plans: units, ownership, orders, memory, ...");
  cmd->footer(kExamples);
  cmd->add_option("old", flags->old_path, "The plan to compare against (e.g. the golden plan)")
      ->required();
  cmd->add_option("new", flags->new_path, "The plan to compare")->required();
  cmd->add_option("--format", flags->format,
                  "text (default), markdown (for a pull-request comment) or json");
  cmd->add_option("--color", flags->color,
                  "auto (default: only when stdout is a terminal and NO_COLOR is unset), always "
                  "or never; text only");
  cmd->add_option("--ignore", flags->ignore,
                  "Leave this field out of the comparison, e.g. diagnostics or "
                  "policy.forward_prefetch (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--include", flags->include,
                  "Compare a field ignored by default (generator, model.path, model.sha256, "
                  "trace.times) (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--fail-on", flags->fail_on,
                  "Exit 1 only when this threshold trips, e.g. memory-increase=5% or "
                  "units-changed (repeatable)")
      ->allow_extra_args(false);
  cmd->add_flag("-q,--quiet", flags->quiet, "Print nothing; the exit status is the answer");
  add_predict_flags(*cmd, flags->prediction, "With --profile: ");
  cmd->callback([cmd, flags] {
    for (const std::string& flag : predict_detail_flags()) {
      if (cmd->count(flag) > 0 && flags->prediction.profile.empty()) {
        fail(ExitCode::kUsage, flag + " is for predicting the step; add --profile");
      }
    }
    run_diff(*flags);
  });
}

}  // namespace mfsdp::cli
