#pragma once
// Does a plan fit a model? The one check of a plan against a model file, used by `mfsdp validate
// --model`, by the executor before it shards anything and by `mfsdp export`. Compared by
// structure only (never weights): the structural hash, the units' modules and types, and every
// parameter's names, shape, dtype, requires_grad and ties, in both directions. No LibTorch.

#include <string>
#include <vector>

#include "planner/torchscript/model_ir.h"
#include "schema/plan.h"
#include "schema/problem.h"

namespace mfsdp::planner {

// Mismatches between `plan` and `model`, each at the plan's JSON path (a model parameter the
// plan lacks is reported at "units"). `model_path` names the model in messages.
std::vector<schema::Problem> compare_plan_with_model(const schema::Plan& plan, const ModelIR& model,
                                                     const std::string& model_path);

// Loads `model_path` (throws Error(kModel) when it cannot) and compares.
std::vector<schema::Problem> check_plan_against_model(const schema::Plan& plan,
                                                      const std::string& model_path);

// What to tell the user when a plan does not fit: which side is wrong follows from the
// structural hash. A hash that differs means another model; a hash that matches with other
// differences means the plan was edited after mfsdp plan wrote it.
struct FitHints {
  std::string other_model;
  std::string edited_plan;
};

// Throws Error(kUsage) when compare_plan_with_model finds a mismatch, in one line:
// "MODEL does not match PLAN_NAME: PATH: WHAT (and N more); HINT". The mismatch named is the
// most specific one (a unit or parameter before the structural hash).
void require_plan_fits_model(const schema::Plan& plan, const ModelIR& model,
                             const std::string& model_path, const std::string& plan_name,
                             const FitHints& hints);

}  // namespace mfsdp::planner
