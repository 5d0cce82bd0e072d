#pragma once
// `validate --model`: does a plan fit a model file? Compared by structure only (never weights):
// the structural hash, the units' modules and types, and every parameter's names, shape,
// dtype, requires_grad and ties, in both directions.

#include <string>
#include <vector>

#include "planner/model_ir.h"
#include "schema/plan.h"
#include "schema/problem.h"

namespace mfsdp::cli {

// Mismatches between `plan` and `model`, each at the plan's JSON path (a model parameter the
// plan lacks is reported at "units"). `model_path` names the model in messages.
std::vector<schema::Problem> compare_plan_with_model(const schema::Plan& plan,
                                                     const planner::ModelIR& model,
                                                     const std::string& model_path);

// Loads `model_path` (throws Error(kModel) when it cannot) and compares.
std::vector<schema::Problem> check_plan_against_model(const schema::Plan& plan,
                                                      const std::string& model_path);

}  // namespace mfsdp::cli
