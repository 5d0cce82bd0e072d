// `mfsdp show plan.json`: a plan as a reviewer reads it. Only a plan that validates is shown:
// a summary of a broken plan would present wrong numbers as facts, so show refuses it the way
// validate reports it.
#include "cli/show_command.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/byte_size.h"
#include "cli/plan_report.h"
#include "cli/predict_flags.h"
#include "cli/predict_report.h"
#include "cli/validate_command.h"
#include "cli/whole_number.h"
#include "predict/calibrate.h"
#include "schema/error.h"
#include "schema/plan_json.h"

namespace mfsdp::cli {
namespace {

struct ShowFlags {
  std::string plan;
  std::string format = "text";
  bool predict = false;
  PredictFlags prediction;
  std::string metrics_path, run_trace_path;
  std::string calibrate_path;  // --calibrate: the calibrated profile to write
  std::string memory_budget;   // --memory-budget SIZE, or ""
};

const char* kExamples = R"(
Examples:
  # Mesh, policy, units, orders, the step schedule, memory, communication and diagnostics:
  mfsdp show gpt.plan.json | less -S

  # A digest for tools (documented in docs/cli.md), e.g. the live bytes at every entry:
  mfsdp show gpt.plan.json --format json | jq '.schedule[] | [.point, .unit, .unsharded_bytes]'

  # The unit tree (solid edges) with the forward order (dashed) as a picture:
  mfsdp show gpt.plan.json --format dot | dot -Tsvg -o gpt.plan.svg

  # Predict a step on a machine profiled by `mfsdp probe` (the plan needs --trace-input):
  mfsdp show gpt-traced.plan.json --predict --profile probe.json --microbatches 4
  # ... on an 8x H100 NVLink node, the trace's CPU times scaled by a measured ratio:
  mfsdp show gpt-traced.plan.json --predict --profile h100-nvlink --compute-scale 0.02
  # ... and compare with what a run measured (per-unit errors from its --trace):
  mfsdp show gpt-traced.plan.json --predict --profile probe.json --metrics m.jsonl --run-trace t.json
  # ... and whether a rank fits in an 80 GiB GPU, and if not what would make it fit:
  mfsdp show gpt-traced.plan.json --predict --profile h100-nvlink --compute-scale 0.02 \
      --memory-budget 80GiB
  # ... and fit the profile to that run, for predicting and choosing other plans on this machine:
  mfsdp show gpt-traced.plan.json --predict --profile probe.json --metrics m.jsonl \
      --calibrate calibrated.json

A plan with problems is not shown: its problems go to stderr as 'FILE: json.path: what is
wrong' (as in 'mfsdp validate') and the exit status is 1.
Exit codes: 0 shown, 1 the plan is invalid, 2 bad flags or not a plan file, 5 the calibrated
profile cannot be written.
)";

void show_prediction(const schema::Plan& plan, const ShowFlags& flags) {
  predict::PredictRequest request = predict_request(flags.prediction);
  request.metrics_path = flags.metrics_path;
  request.run_trace_path = flags.run_trace_path;
  if (flags.calibrate_path.empty()) {
    const predict::PlanPrediction prediction = predict::predict_plan(plan, request);
    std::optional<int64_t> budget;
    if (!flags.memory_budget.empty()) {
      budget = parse_bytes(flags.memory_budget, "--memory-budget");
    }
    if (flags.format == "json") {
      nlohmann::ordered_json j = prediction_json(prediction);
      j["memory"] = memory_json(plan, prediction, budget);
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << render_prediction_text(prediction, flags.plan)
                << render_memory_text(plan, prediction, budget);
    }
    return;
  }
  // --calibrate: the profile fitted to the run, written, and the plan predicted on it.
  const predict::PlanPrediction before = predict::predict_plan(plan, request);
  const predict::CalibrationFit fit = predict::calibrate(
      plan, before.profile, request, *before.measured, flags.plan, flags.metrics_path);
  schema::write_file_atomically(flags.calibrate_path, predict::profile_text(fit.profile));
  const predict::PlanPrediction after = predict::predict_plan(plan, fit.profile, request);
  char factors[160];
  std::snprintf(factors, sizeof factors, "compute x%.3f, collectives x%.3f", fit.compute_factor,
                fit.collective_factor);
  if (flags.format == "json") {
    nlohmann::ordered_json j = prediction_json(after);
    j["calibration"] = {{"profile", flags.calibrate_path},
                        {"compute_factor", fit.compute_factor},
                        {"collective_factor", fit.collective_factor},
                        {"uncalibrated_step_ms", before.prediction.step_us / 1000},
                        {"notes", fit.notes}};
    std::cout << j.dump(2) << "\n";
    return;
  }
  char was[96];
  std::snprintf(was, sizeof was, "%.2f ms", before.prediction.step_us / 1000);
  std::cout << render_prediction_text(after, flags.plan) << "calibrated    " << factors
            << " against " << flags.metrics_path << " (uncalibrated step " << was
            << "); profile written to " << flags.calibrate_path << "\n";
  for (const std::string& note : fit.notes) std::cout << "note          " << note << "\n";
}

void check_predict_flags(const CLI::App& cmd, const ShowFlags& flags) {
  for (const char* flag :
       {"--profile", "--microbatches", "--microbatch-size", "--compute-scale", "--optimizer",
        "--metrics", "--run-trace", "--calibrate", "--memory-budget"}) {
    if (!flags.predict && cmd.count(flag) > 0) {
      fail(ExitCode::kUsage, std::string(flag) + " is for --predict; add --predict");
    }
  }
  if (flags.predict && flags.prediction.profile.empty()) {
    fail(ExitCode::kUsage,
         "--predict needs --profile FILE|NAME: a file from mfsdp probe, or a built-in (" +
             predict::builtin_profile_list() + "; docs/predict.md#profiles)");
  }
  if (!flags.calibrate_path.empty() && !flags.memory_budget.empty()) {
    fail(ExitCode::kUsage,
         "--memory-budget weighs the prediction's memory, and --calibrate "
         "writes a profile; drop one of them");
  }
  if (!flags.calibrate_path.empty() && flags.metrics_path.empty()) {
    fail(ExitCode::kUsage,
         "--calibrate fits the profile to a run: give that run's --metrics file too");
  }
  if (flags.predict && flags.format == "dot") {
    fail(ExitCode::kUsage, "--predict prints text or json, not dot");
  }
}

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
  if (flags.predict) {
    show_prediction(checked.plan, flags);
    return;
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
  cmd->add_flag("--predict", flags->predict,
                "Predict the plan's training step on a profiled machine instead "
                "(docs/predict.md); needs --profile and a plan made with --trace-input");
  add_predict_flags(*cmd, flags->prediction, "With --predict: ");
  cmd->add_option("--metrics", flags->metrics_path,
                  "A run's --metrics file: report the measured step and the error")
      ->type_name("FILE");
  cmd->add_option("--run-trace", flags->run_trace_path,
                  "A run's --trace file: report measured per-unit times beside the predicted")
      ->type_name("FILE");
  cmd->add_option("--calibrate", flags->calibrate_path,
                  "With --metrics: fit the profile's compute and collective times to that run "
                  "and write the calibrated profile to this file (docs/predict.md)")
      ->type_name("FILE");
  cmd->add_option("--memory-budget", flags->memory_budget,
                  "With --predict: weigh a rank's memory against SIZE (e.g. 80GiB): whether it "
                  "fits, which term is largest and what would make it fit (more ranks, "
                  "checkpointing, a smaller microbatch; docs/predict.md#memory)")
      ->type_name("SIZE");
  cmd->callback([cmd, flags] {
    check_predict_flags(*cmd, *flags);
    run_show(*flags);
  });
}

}  // namespace mfsdp::cli
