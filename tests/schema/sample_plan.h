#pragma once
// A small plan, built by hand, that satisfies every rule of check_plan. Tests corrupt one
// field of a copy at a time and assert the exact problems that follow.

#include <string>
#include <vector>

#include "schema/plan.h"
#include "schema/problem.h"

namespace mfsdp::schema {

// 4 ranks: shard_size 2 × replicate_size 2, bfloat16 compute, float32 reduce, align 16 bytes.
// Units "<root>" (root) with children "layers.0" (frozen) and "layers.1" (called twice).
Plan sample_plan();

// "path: message" of each problem, so a comparison shows every difference at once.
std::vector<std::string> problem_lines(const std::vector<Problem>& problems);

}  // namespace mfsdp::schema
