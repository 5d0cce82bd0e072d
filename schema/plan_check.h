#pragma once
// Semantic checks of a parsed plan: cross-references, layout arithmetic, orders, schedule and
// memory consistency. Each problem names the JSON path of the offending field.

#include <vector>

#include "schema/plan.h"
#include "schema/problem.h"

namespace mfsdp::schema {

std::vector<Problem> check_plan(const Plan& plan);

// The values of a training section (paths start at "training."): positive counts, known
// optimizer, schedule and loss names, betas in [0, 1). check_plan includes these.
std::vector<Problem> check_training(const Training& training);

}  // namespace mfsdp::schema
