#pragma once
// The one way to read a plan file, for every command, the executor and checkpoints, with the
// strictness said at the call: the plan's shape only (every field present and typed, sizes
// that add up within 64 bits), or its shape and every rule of plan_check.h.

#include <string>
#include <vector>

#include "schema/plan.h"
#include "schema/problem.h"

namespace mfsdp::schema {

enum class PlanCheck {
  kShape,  // parse_plan: enough to read, compare or describe it
  kRules,  // parse_plan, then check_plan: enough to execute it or index shards by it
};

// A plan file and what is wrong with it, for a reviewer. `parsed` is false when the document
// does not have the plan's shape; then `plan` is incomplete and `problems` are the shape
// problems only (check_plan needs a complete plan). Throws Error(kUsage) when the file is not
// a plan at all (unreadable, not JSON, not an object, unknown schema version).
struct PlanFileReport {
  Plan plan;
  bool parsed = false;
  std::vector<Problem> problems;
};
PlanFileReport inspect_plan_file(const std::string& path, PlanCheck check = PlanCheck::kRules);

// The plan, or Error(kUsage) in one line: "PATH: not a valid plan (FIRST PROBLEM; and N
// more); HINT", where HINT defaults to "run mfsdp validate PATH".
Plan load_plan_file(const std::string& path, PlanCheck check, const std::string& hint = "");

}  // namespace mfsdp::schema
