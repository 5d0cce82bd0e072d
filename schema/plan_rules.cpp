#include "schema/plan_rules.h"

#include <algorithm>

namespace mfsdp::schema {

std::string compute_dtype(const Policy& policy, const std::string& storage_dtype) {
  if (policy.param_dtype && is_floating_dtype(storage_dtype)) return *policy.param_dtype;
  return storage_dtype;
}

int64_t align_elems(const Policy& policy, const std::string& storage_dtype) {
  const int64_t smallest =
      std::min(dtype_size(storage_dtype), dtype_size(compute_dtype(policy, storage_dtype)));
  return std::max<int64_t>(1, policy.align_bytes / smallest);
}

int64_t padded_numel(int64_t numel, int64_t shard_size, int64_t align_elems) {
  const int64_t multiple = shard_size * align_elems;
  return (numel + multiple - 1) / multiple * multiple;
}

bool has_gradient(const Group& group) {
  return group.requires_grad && is_floating_dtype(group.dtype);
}

int64_t unit_unsharded_bytes(const Policy& policy, const Unit& unit) {
  int64_t bytes = 0;
  for (const Group& group : unit.groups) {
    bytes += group.padded_numel * dtype_size(compute_dtype(policy, group.dtype));
  }
  return bytes;
}

int64_t unit_sharded_bytes(const Unit& unit) {
  int64_t bytes = 0;
  for (const Group& group : unit.groups) bytes += group.shard_numel * dtype_size(group.dtype);
  return bytes;
}

int64_t unit_reduce_scatter_bytes(const Policy& policy, const Unit& unit) {
  int64_t bytes = 0;
  for (const Group& group : unit.groups) {
    if (has_gradient(group)) bytes += group.padded_numel * dtype_size(policy.reduce_dtype);
  }
  return bytes;
}

int64_t unit_gradient_shard_bytes(const Policy& policy, const Unit& unit) {
  int64_t bytes = 0;
  for (const Group& group : unit.groups) {
    if (has_gradient(group)) bytes += group.shard_numel * dtype_size(policy.reduce_dtype);
  }
  return bytes;
}

std::vector<Stream> expected_streams(const Policy& policy) {
  if (policy.unified_stream) {
    return {{"unified", {"all_gather", "reduce_scatter", "all_reduce"}}};
  }
  return {{"all_gather", {"all_gather"}}, {"reduce_scatter", {"reduce_scatter", "all_reduce"}}};
}

std::string schedule_point_name(const ScheduleEntry& entry) {
  if (!entry.unit) return entry.point;
  std::string name = entry.point + " " + *entry.unit;
  if (entry.call > 0) name += "#" + std::to_string(entry.call);
  return name;
}

}  // namespace mfsdp::schema
