#pragma once
// Semantic checks of a parsed plan: cross-references, layout arithmetic, orders, schedule and
// memory consistency. Each problem names the JSON path of the offending field.

#include <vector>

#include "schema/plan.h"
#include "schema/problem.h"

namespace mfsdp::schema {

std::vector<Problem> check_plan(const Plan& plan);

}  // namespace mfsdp::schema
