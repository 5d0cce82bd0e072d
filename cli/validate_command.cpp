// `mfsdp validate plan.json`: the shape check (parse_plan), the rules (check_plan) and, with
// --model, the match with a model file. Problems go to stdout, one per line, so they can be
// piped; the verdict is the usual one-line error on stderr, and the exit status is the answer.
#include "cli/validate_command.h"

#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "schema/error.h"
#include "schema/plan_check.h"
#include "schema/plan_json.h"

namespace mfsdp::cli {
namespace {

// Model mismatches cascade (one wrong layer breaks every parameter under it): the first ones
// say what is wrong, a count says how much.
constexpr size_t kModelProblemsShown = 20;

struct ValidateFlags {
  std::string plan;
  std::string model;
  std::string format = "text";
  bool quiet = false;
};

const char* kExamples = R"(
Examples:
  # Is the plan well formed and self-consistent?
  mfsdp validate gpt.plan.json

  # ... and was it made for this model (structure, parameter names, shapes, dtypes)?
  mfsdp validate gpt.plan.json --model gpt.pt

  # In a script: the exit status only, or a JSON report for tools:
  mfsdp validate gpt.plan.json --quiet && echo ok
  mfsdp validate gpt.plan.json --format json | jq '.problems[].path'

Output: 'FILE: valid (N units, M parameters)' on stdout. An invalid plan prints each problem on
stdout as 'FILE: json.path: what is wrong', then 'mfsdp: error: FILE is invalid: N problems' on
stderr. Model mismatches are listed up to 20, then counted (--format json lists all).
Exit codes: 0 valid, 1 invalid, 2 bad flags or not a plan file (unreadable, not JSON, unknown
schema version), 3 the --model cannot be loaded.
)";

struct Finding {
  const char* check;  // "shape", "rules" or "model"
  schema::Problem problem;
};

int64_t parameter_count(const schema::Plan& plan) {
  int64_t count = 0;
  for (const auto& unit : plan.units) {
    for (const auto& group : unit.groups) count += static_cast<int64_t>(group.params.size());
  }
  return count;
}

std::string plural(size_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

void print_text(const ValidateFlags& flags, const CheckedPlan& checked,
                const std::vector<Finding>& findings) {
  if (findings.empty()) {
    if (flags.quiet) return;
    std::cout << flags.plan << ": valid (" << plural(checked.plan.units.size(), "unit") << ", "
              << plural(parameter_count(checked.plan), "parameter");
    if (!flags.model.empty()) std::cout << "; matches " << flags.model;
    std::cout << ")\n";
    return;
  }
  size_t model_shown = 0;
  size_t model_total = 0;
  for (const Finding& f : findings) {
    if (std::string(f.check) == "model" && ++model_total > kModelProblemsShown) continue;
    model_shown += std::string(f.check) == "model";
    std::cout << flags.plan << ": " << f.problem.str() << "\n";
  }
  if (model_total > model_shown) {
    std::cout << flags.plan << ": ... " << model_total - model_shown << " more mismatches with "
              << flags.model << " (--format json lists all)\n";
  }
}

void print_json(const ValidateFlags& flags, const CheckedPlan& checked,
                const std::vector<Finding>& findings) {
  nlohmann::ordered_json report;
  report["file"] = flags.plan;
  report["valid"] = findings.empty();
  report["schema"] = schema::kPlanSchemaVersion;
  report["units"] = checked.parsed ? nlohmann::ordered_json(checked.plan.units.size()) : nullptr;
  report["parameters"] =
      checked.parsed ? nlohmann::ordered_json(parameter_count(checked.plan)) : nullptr;
  report["model"] =
      flags.model.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(flags.model);
  nlohmann::ordered_json checks = nlohmann::ordered_json::array({"shape"});
  if (checked.parsed) checks.push_back("rules");
  if (checked.parsed && !flags.model.empty()) checks.push_back("model");
  report["checks"] = checks;
  report["problems"] = nlohmann::ordered_json::array();
  for (const Finding& f : findings) {
    report["problems"].push_back(
        {{"check", f.check}, {"path", f.problem.path}, {"message", f.problem.message}});
  }
  // Messages quote input text; invalid UTF-8 in a plan must not stop the report.
  std::cout << report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
}

void run_validate(const ValidateFlags& flags, const ModelCheck& model_check) {
  if (!flags.model.empty() && !model_check) {
    fail(ExitCode::kInternal, "validate --model reached mfsdp; only mfsdp-torch loads models");
  }
  const CheckedPlan checked = read_checked_plan(flags.plan);
  std::vector<Finding> findings;
  const char* stage = checked.parsed ? "rules" : "shape";
  for (const auto& p : checked.problems) findings.push_back({stage, p});
  if (checked.parsed && !flags.model.empty()) {
    for (auto& p : model_check(checked.plan, flags.model)) findings.push_back({"model", p});
  }
  if (flags.format == "json") {
    print_json(flags, checked, findings);
  } else {
    print_text(flags, checked, findings);
  }
  if (findings.empty()) return;
  // The verdict is the one stderr line every failing mfsdp command prints; the problems
  // themselves went to stdout.
  std::string verdict = flags.plan + " is invalid: " + plural(findings.size(), "problem");
  if (!checked.parsed) {
    verdict += std::string(" in its shape; the rules") +
               (flags.model.empty() ? "" : " and the model") +
               " are checked once it has the plan's shape";
  }
  fail(ExitCode::kFindings, verdict);
}

}  // namespace

CheckedPlan read_checked_plan(const std::string& path) {
  return schema::inspect_plan_file(path, schema::PlanCheck::kRules);
}

void add_validate_command(CLI::App& app, ModelCheck model_check) {
  auto flags = std::make_shared<ValidateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "validate", "Check a plan file: its shape, its rules, and optionally that it fits a model");
  cmd->footer(kExamples);
  cmd->add_option("plan", flags->plan, "Plan file (mfsdp.plan/1)")->required();
  cmd->add_option("--model", flags->model,
                  "Also check that the plan was made for this TorchScript model: structural "
                  "hash, module types, parameter names, shapes, dtypes and ties");
  cmd->add_option("--format", flags->format, "Output: text (default) or json (a report)")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_flag("-q,--quiet", flags->quiet, "Print nothing when the plan is valid");
  cmd->callback(
      [flags, model_check = std::move(model_check)] { run_validate(*flags, model_check); });
}

}  // namespace mfsdp::cli
