#include "schema/plan_rules.h"

#include <algorithm>

#include "schema/checked_int64.h"
#include "schema/error.h"

namespace mfsdp::schema {
namespace {

int64_t multiply(int64_t a, int64_t b, const std::string& what) {
  const std::optional<int64_t> product = checked_mul(a, b);
  if (!product) fail_size_overflow(what);
  return *product;
}

// bytes + count × size, where the result is the quantity `what`.
int64_t add_product(int64_t bytes, int64_t count, int64_t size, const std::string& what) {
  return add_sizes(bytes, multiply(count, size, what), what);
}

std::string of_unit(const Unit& unit, const char* what) {
  return "unit '" + unit.name + "': " + what;
}

}  // namespace

std::string main_grad_dtype(const Policy& policy) {
  return is_floating_dtype(policy.reduce_dtype) && dtype_size(policy.reduce_dtype) >= 4
             ? policy.reduce_dtype
             : "float32";
}

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
  if (shard_size < 1 || align_elems < 1) {
    fail(ExitCode::kInternal, "padded_numel needs a shard size and an alignment of at least 1");
  }
  const std::optional<int64_t> multiple = checked_mul(shard_size, align_elems);
  const std::optional<int64_t> rounded_up =
      multiple ? checked_add(numel, *multiple - 1) : std::nullopt;
  if (!rounded_up) {
    fail_size_overflow("numel " + std::to_string(numel) + " padded to a multiple of shard size " +
                       std::to_string(shard_size) + " × alignment " + std::to_string(align_elems) +
                       " elements");
  }
  return *rounded_up / *multiple * *multiple;
}

void fail_size_overflow(const std::string& what) {
  fail(ExitCode::kPlanning, what +
                                " does not fit in 64 bits (at most 9223372036854775807); plan "
                                "for a smaller world size (--world-size) or alignment (--align)");
}

int64_t add_sizes(int64_t a, int64_t b, const std::string& what) {
  const std::optional<int64_t> sum = checked_add(a, b);
  if (!sum) fail_size_overflow(what);
  return *sum;
}

bool has_gradient(const Group& group) {
  return group.requires_grad && is_floating_dtype(group.dtype);
}

int64_t unit_unsharded_bytes(const Policy& policy, const Unit& unit) {
  const std::string what =
      of_unit(unit, "unsharded_bytes (Σ groups padded_numel × compute dtype size)");
  int64_t bytes = 0;
  for (const Group& group : unit.groups) {
    const int64_t size = dtype_size(compute_dtype(policy, group.dtype));
    bytes = add_product(bytes, group.padded_numel, size, what);
  }
  return bytes;
}

int64_t unit_sharded_bytes(const Unit& unit) {
  const std::string what = of_unit(unit, "sharded_bytes (Σ groups shard_numel × dtype size)");
  int64_t bytes = 0;
  for (const Group& group : unit.groups) {
    bytes = add_product(bytes, group.shard_numel, dtype_size(group.dtype), what);
  }
  return bytes;
}

int64_t unit_reduce_scatter_bytes(const Policy& policy, const Unit& unit) {
  const std::string what =
      of_unit(unit, "reduce-scatter bytes (Σ padded_numel × reduce dtype size)");
  int64_t bytes = 0;
  for (const Group& group : unit.groups) {
    if (!has_gradient(group)) continue;
    bytes = add_product(bytes, group.padded_numel, dtype_size(policy.reduce_dtype), what);
  }
  return bytes;
}

int64_t unit_gradient_shard_bytes(const Policy& policy, const Unit& unit) {
  const std::string what =
      of_unit(unit, "gradient shard bytes (Σ shard_numel × main gradient dtype size)");
  int64_t bytes = 0;
  for (const Group& group : unit.groups) {
    if (!has_gradient(group)) continue;
    bytes = add_product(bytes, group.shard_numel, dtype_size(main_grad_dtype(policy)), what);
  }
  return bytes;
}

std::optional<int64_t> per_rank_bytes(const Memory& memory) {
  const std::optional<int64_t> held =
      checked_add(memory.sharded_param_bytes, memory.sharded_grad_bytes);
  return held ? checked_add(*held, memory.slot_bytes) : std::nullopt;
}

std::optional<int64_t> communication_bytes(const Communication& communication) {
  const std::optional<int64_t> collectives =
      checked_add(communication.all_gather_bytes, communication.reduce_scatter_bytes);
  return collectives ? checked_add(*collectives, communication.all_reduce_bytes) : std::nullopt;
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
