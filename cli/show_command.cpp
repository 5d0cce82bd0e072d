// `mfsdp show plan.json`: a plan as a reviewer reads it. Only a plan that validates is shown:
// a summary of a broken plan would present wrong numbers as facts, so show refuses it the way
// validate reports it.
#include "cli/show_command.h"

#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/plan_report.h"
#include "cli/validate_command.h"
#include "schema/error.h"

namespace mfsdp::cli {
namespace {

struct ShowFlags {
  std::string plan;
  std::string format = "text";
};

const char* kExamples = R"(
Examples:
  # Mesh, policy, units, orders, the step schedule, memory, communication and diagnostics:
  mfsdp show gpt.plan.json | less -S

  # A digest for tools (documented in docs/cli.md), e.g. the live bytes at every entry:
  mfsdp show gpt.plan.json --format json | jq '.schedule[] | [.point, .unit, .unsharded_bytes]'

  # The unit tree (solid edges) with the forward order (dashed) as a picture:
  mfsdp show gpt.plan.json --format dot | dot -Tsvg -o gpt.plan.svg

A plan with problems is not shown: its problems go to stderr as 'FILE: json.path: what is
wrong' (as in 'mfsdp validate') and the exit status is 1.
Exit codes: 0 shown, 1 the plan is invalid, 2 bad flags or not a plan file.
)";

void run_show(const ShowFlags& flags) {
  const CheckedPlan checked = read_checked_plan(flags.plan);
  if (!checked.problems.empty()) {
    for (const auto& problem : checked.problems) {
      std::cerr << flags.plan << ": " << problem.str() << "\n";
    }
    const size_t n = checked.problems.size();
    fail(ExitCode::kFindings, flags.plan + " is invalid: " + std::to_string(n) +
                                  (n == 1 ? " problem" : " problems") +
                                  "; show needs a valid plan (see mfsdp validate)");
  }
  if (flags.format == "json") {
    std::cout << plan_report_json(checked.plan, flags.plan)
                     .dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
              << "\n";
  } else if (flags.format == "dot") {
    std::cout << render_plan_dot(checked.plan, flags.plan);
  } else {
    std::cout << render_plan_text(checked.plan, flags.plan);
  }
}

}  // namespace

void add_show_command(CLI::App& app) {
  auto flags = std::make_shared<ShowFlags>();
  CLI::App* cmd = app.add_subcommand(
      "show", "Summarize a plan: units, orders, step schedule, memory and communication");
  cmd->footer(kExamples);
  cmd->add_option("plan", flags->plan, "Plan file (mfsdp.plan/1); it must validate")->required();
  cmd->add_option("--format", flags->format,
                  "text (default: for a terminal), json (for tools) or dot (Graphviz unit tree)")
      ->check(CLI::IsMember({"text", "json", "dot"}));
  cmd->callback([flags] { run_show(*flags); });
}

}  // namespace mfsdp::cli
