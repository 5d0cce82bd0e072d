// The rules of a mesh and a sharding policy, in one place: `mfsdp plan` (flags and scope
// file), ShardingScope (the C++ API) and check_plan (validate, the executor) all use them.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "schema/plan_check.h"

namespace mfsdp::schema {
namespace {

using Wide = __int128;

std::string quote(const std::string& text) {
  const std::string literal =
      nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return "'" + literal.substr(1, literal.size() - 2) + "'";
}

void check_floating(std::vector<Problem>& problems, const std::string& path,
                    const std::string& dtype) {
  if (is_floating_dtype(dtype)) return;
  const std::vector<std::string>& names = dtype_names();
  const bool known = std::find(names.begin(), names.end(), dtype) != names.end();
  problems.push_back({path, (known ? quote(dtype) + " is not a floating dtype"
                                   : quote(dtype) + " is not a dtype mfsdp knows") +
                                "; use float32, bfloat16, float16 or float64"});
}

}  // namespace

std::string world_size_range() {
  return "from 1 to " + std::to_string(kMaxWorldSize) + " (ranks are 32-bit ints in Gloo and NCCL)";
}

std::string align_range() {
  return "a power of two from " + std::to_string(kMinAlignBytes) + " to " +
         std::to_string(kMaxAlignBytes) + " (1 GiB)";
}

std::vector<Problem> check_mesh(const Mesh& mesh) {
  std::vector<Problem> problems;
  const auto report = [&](const char* path, const std::string& message) {
    problems.push_back({path, message});
  };
  if (mesh.world_size < 1 || mesh.world_size > kMaxWorldSize) {
    report("mesh.world_size",
           std::to_string(mesh.world_size) + " is invalid; it must be " + world_size_range());
    return problems;  // the sizes below are measured against it
  }
  if (mesh.replicate_size < 1 || mesh.world_size % mesh.replicate_size != 0) {
    report("mesh.replicate_size", std::to_string(mesh.replicate_size) +
                                      " must be at least 1 and divide the world size " +
                                      std::to_string(mesh.world_size));
  } else if (Wide{mesh.shard_size} * mesh.replicate_size != mesh.world_size) {
    report("mesh.world_size", std::to_string(mesh.world_size) + " is not shard_size " +
                                  std::to_string(mesh.shard_size) + " × replicate_size " +
                                  std::to_string(mesh.replicate_size));
  }
  return problems;
}

std::vector<Problem> check_policy(const Policy& policy) {
  std::vector<Problem> problems;
  if (policy.param_dtype) check_floating(problems, "policy.param_dtype", *policy.param_dtype);
  check_floating(problems, "policy.reduce_dtype", policy.reduce_dtype);
  for (const auto& [path, depth] :
       {std::pair{"policy.forward_prefetch", policy.forward_prefetch},
        std::pair{"policy.backward_prefetch", policy.backward_prefetch}}) {
    if (depth < 0) {
      problems.push_back(
          {path, std::to_string(depth) + " is invalid; it must be 0 (no prefetch) or more"});
    }
  }
  if (policy.resident_budget_bytes < 0) {
    problems.push_back(
        {"policy.resident_budget_bytes", std::to_string(policy.resident_budget_bytes) +
                                             " is invalid; it must be 0 (no cap) or a byte count"});
  }
  const int64_t a = policy.align_bytes;
  if (a < 1 || (a & (a - 1)) != 0) {
    problems.push_back(
        {"policy.align_bytes", std::to_string(a) + " is not a power of two (e.g. 16 or 256)"});
  } else if (a < kMinAlignBytes) {
    // Groups lie back to back in one slot: an odd-length bf16 group would leave the next
    // group's fp32 data, and the NCCL buffers, misaligned.
    problems.push_back({"policy.align_bytes",
                        std::to_string(a) + " is too small; it must be " + align_range() +
                            " (the groups of a unit lie back to back in one buffer, and each "
                            "must start aligned for the GPU)"});
  } else if (a > kMaxAlignBytes) {
    problems.push_back(
        {"policy.align_bytes", std::to_string(a) + " is too large; it must be " + align_range()});
  }
  return problems;
}

}  // namespace mfsdp::schema
