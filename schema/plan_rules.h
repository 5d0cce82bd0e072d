#pragma once
// The arithmetic a plan's derived fields follow. The planner computes them with these
// functions and check_plan holds a plan to the same rules, so the two cannot drift apart.
// All of them expect known dtype names (dtype_size throws mfsdp::Error otherwise). Sizes are
// int64_t: a result that would not fit throws Error(kPlanning) naming the quantity instead of
// wrapping, which only a huge world size times a huge alignment, or a huge model, reaches.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schema/plan.h"

namespace mfsdp::schema {

// The dtype a group is gathered and computed in: policy.param_dtype for a floating group
// when set, the storage dtype otherwise.
std::string compute_dtype(const Policy& policy, const std::string& storage_dtype);
// Dtype of the sharded main gradients: the reduce dtype when it has 32 bits or more, else
// float32. Gradients are reduce-scattered in bfloat16 or float16 but accumulated over
// microbatches, and all-reduced across replicas, in float32, as FSDP2 does.
std::string main_grad_dtype(const Policy& policy);

// Elements that parameter offsets and shard boundaries of a group align to:
// max(1, align_bytes / min(storage dtype size, compute dtype size)).
int64_t align_elems(const Policy& policy, const std::string& storage_dtype);

// numel rounded up to a multiple of shard_size × align_elems.
int64_t padded_numel(int64_t numel, int64_t shard_size, int64_t align_elems);

// a + b, where the sum is the plan quantity `what` (e.g. "communication.all_gather_bytes").
int64_t add_sizes(int64_t a, int64_t b, const std::string& what);
// The Error(kPlanning) the functions here throw: `what` does not fit in 64 bits.
[[noreturn]] void fail_size_overflow(const std::string& what);

// Whether a group's gradient is reduce-scattered: it requires grad and is floating.
bool has_gradient(const Group& group);

// Σ groups padded_numel × compute dtype size.
int64_t unit_unsharded_bytes(const Policy& policy, const Unit& unit);
// Σ groups shard_numel × storage dtype size.
int64_t unit_sharded_bytes(const Unit& unit);
// Gradient bytes fed to one reduce-scatter of the unit: Σ gradient groups padded_numel ×
// reduce dtype size.
int64_t unit_reduce_scatter_bytes(const Policy& policy, const Unit& unit);
// Per-rank gradient shard of the unit: Σ gradient groups shard_numel × reduce dtype size.
// Also what one all-reduce across replicas moves for the unit.
int64_t unit_gradient_shard_bytes(const Policy& policy, const Unit& unit);

// What one rank holds (memory.sharded_param_bytes + sharded_grad_bytes + slot_bytes) and what
// one microbatch moves (communication all-gather + reduce-scatter + all-reduce bytes); none when
// the sum does not fit in 64 bits. parse_plan refuses such plans, so readers may rely on them.
std::optional<int64_t> per_rank_bytes(const Memory& memory);
std::optional<int64_t> communication_bytes(const Communication& communication);

// The `streams` a plan with this policy declares.
std::vector<Stream> expected_streams(const Policy& policy);

// How memory.peak_at names a schedule point: "pre_forward layers.3", "pre_backward shared#1"
// (the call is appended when it is not 0), "end_of_backward".
std::string schedule_point_name(const ScheduleEntry& entry);

}  // namespace mfsdp::schema
