#pragma once
// `mfsdp validate plan.json [--model model.pt]`: is this file a plan the executor may obey?

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "schema/plan.h"
#include "schema/plan_loader.h"
#include "schema/problem.h"

namespace mfsdp::cli {

// A plan file read for a reviewer: schema::inspect_plan_file with every rule checked.
using CheckedPlan = schema::PlanFileReport;
CheckedPlan read_checked_plan(const std::string& path);

// Compares a plan with a model file and returns the mismatches. Throws Error(kModel) when the
// model cannot be loaded. Only mfsdp-torch has one (planner/torchscript/model_check.h).
using ModelCheck =
    std::function<std::vector<schema::Problem>(const schema::Plan&, const std::string& model)>;

// Adds `mfsdp validate` to `app`. Without `model_check`, `--model` is listed but refused: the
// `mfsdp` binary execs mfsdp-torch for it before parsing.
void add_validate_command(CLI::App& app, ModelCheck model_check = nullptr);

}  // namespace mfsdp::cli
