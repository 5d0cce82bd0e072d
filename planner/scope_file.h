#pragma once
// `mfsdp plan --scope scope.json`: an ordered list of fully_shard calls plus mesh and policy,
// for scopes too long for the command line. Format in docs/cli.md.

#include <optional>
#include <string>
#include <vector>

#include "planner/unit_selector.h"
#include "schema/plan.h"

namespace mfsdp::planner {

struct ScopeFile {
  std::optional<int64_t> world_size;
  std::optional<int64_t> replicate_size;
  schema::Policy policy;                // defaults where the file is silent
  std::vector<std::string> policy_set;  // policy keys the file sets, so flags can tell
  std::vector<UnitSelector> units;
  std::optional<schema::Training> training;  // written into the plan for mfsdp run
};

// Throws Error(kUsage) naming the file and the JSON path of the first problem.
ScopeFile read_scope_file(const std::string& path);

}  // namespace mfsdp::planner
