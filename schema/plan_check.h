#pragma once
// Semantic checks of a parsed plan: cross-references, layout arithmetic, orders, schedule and
// memory consistency. Each problem names the JSON path of the offending field.

#include <string>
#include <vector>

#include "schema/plan.h"
#include "schema/problem.h"

namespace mfsdp::schema {

std::vector<Problem> check_plan(const Plan& plan);

// The values of a training section (paths start at "training."): positive counts, known
// optimizer, schedule and loss names, betas in [0, 1). check_plan includes these.
std::vector<Problem> check_training(const Training& training);

// The values of a mesh and of a sharding policy, wherever they come from (paths start at
// "mesh." and "policy."; each message follows the value's name: "24 is not a power of two
// (e.g. 16 or 256)"). A world size out of range is the only problem then reported for the
// mesh. check_plan includes these; `mfsdp plan` and ShardingScope refuse with the first.
std::vector<Problem> check_mesh(const Mesh& mesh);
std::vector<Problem> check_policy(const Policy& policy);
// The accepted world sizes and alignments, as the messages above state them: "from 1 to
// 2147483647 (ranks are ...)", "a power of two from 1 to 1073741824 (1 GiB)".
std::string world_size_range();
std::string align_range();

}  // namespace mfsdp::schema
