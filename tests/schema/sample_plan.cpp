#include "sample_plan.h"

namespace mfsdp::schema {
namespace {

ParamLayout param(std::string name, std::vector<int64_t> shape, int64_t numel, int64_t offset,
                  std::vector<std::string> aliases = {}) {
  return {std::move(name), std::move(shape), numel, offset, std::move(aliases)};
}

ScheduleEntry entry(std::string phase, std::string point, std::string unit, int64_t call,
                    std::vector<std::string> all_gather, std::vector<std::string> wait,
                    std::vector<std::string> reshard, std::vector<std::string> reduce_scatter,
                    int64_t unsharded_bytes) {
  return {std::move(phase),      std::move(point), std::move(unit),    call,
          std::move(all_gather), std::move(wait),  std::move(reshard), std::move(reduce_scatter),
          unsharded_bytes};
}

}  // namespace

Plan sample_plan() {
  Plan plan;
  plan.generator = "mfsdp 0.1.0";
  plan.model = {"model.pt",
                "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752",
                /*modules=*/5,
                /*parameters=*/7,
                /*parameter_numel=*/86};  // 12 + 3 + 1 + 16 + 4 + 40 + 10
  plan.mesh = {/*world_size=*/4, /*shard_size=*/2, /*replicate_size=*/2};
  plan.policy.param_dtype = "bfloat16";
  plan.policy.reduce_dtype = "float32";
  plan.policy.reshard_after_forward = true;
  plan.policy.forward_prefetch = 0;
  plan.policy.backward_prefetch = 0;
  plan.policy.resident_budget_bytes = 0;
  plan.policy.unified_stream = false;
  plan.policy.align_bytes = 16;
  plan.streams = {{"all_gather", {"all_gather"}},
                  {"reduce_scatter", {"reduce_scatter", "all_reduce"}}};

  // float32 groups compute in bfloat16: align 16 / min(4, 2) = 8 elements, padded to a
  // multiple of shard 2 × 8 = 16. The int64 group computes in int64: 16 / 8 = 2 elements,
  // padded to a multiple of 2 × 2 = 4.
  Unit root;
  root.name = kRootName;
  root.type = "__torch__.Net";
  root.root = true;
  root.call_count = 1;
  root.kept_after_forward = true;  // backward starts with it, so forward leaves it gathered
  // head.bias starts at 12 rounded up to 8 → 16; numel 16 + 3 = 19 → padded 32, shard 16.
  root.groups.push_back(
      {"float32",
       true,
       19,
       32,
       16,
       {param("head.weight", {3, 4}, 12, 0, {"embed.weight"}), param("head.bias", {3}, 3, 16)}});
  // A scalar: empty shape, numel 1 → padded 4, shard 2.
  root.groups.push_back({"int64", false, 1, 4, 2, {param("step", {}, 1, 0)}});
  root.sharded_bytes = 80;    // 16 × 4 + 2 × 8
  root.unsharded_bytes = 96;  // 32 × 2 (bfloat16) + 4 × 8

  Unit layer0;
  layer0.name = "layers.0";
  layer0.type = "__torch__.Block";
  layer0.parent = kRootName;
  layer0.call_count = 1;
  // Frozen: gathered like any unit but never reduce-scattered. numel 20 → padded 32, shard 16.
  layer0.groups.push_back(
      {"float32",
       false,
       20,
       32,
       16,
       {param("layers.0.weight", {4, 4}, 16, 0), param("layers.0.bias", {4}, 4, 16)}});
  layer0.buffers.push_back({"layers.0.running_mean", {4}, "float32"});
  layer0.sharded_bytes = 64;    // 16 × 4
  layer0.unsharded_bytes = 64;  // 32 × 2

  Unit layer1;
  layer1.name = "layers.1";
  layer1.type = "__torch__.Block";
  layer1.parent = kRootName;
  layer1.call_count = 2;  // applied twice in forward, like a shared block
  // numel 40 + 10 = 50 → padded 64, shard 32.
  layer1.groups.push_back(
      {"float32",
       true,
       50,
       64,
       32,
       {param("layers.1.weight", {10, 4}, 40, 0), param("layers.1.bias", {10}, 10, 40)}});
  layer1.sharded_bytes = 128;    // 32 × 4
  layer1.unsharded_bytes = 128;  // 64 × 2

  plan.units = {root, layer0, layer1};
  plan.roots = {kRootName};
  plan.forward_order = {kRootName, "layers.0", "layers.1"};
  plan.backward_order = {kRootName, "layers.1", "layers.0"};

  // No prefetch. unsharded_bytes counts the units gathering or gathered after an entry's
  // all-gathers and before its reshards: <root> 96, layers.0 64, layers.1 128.
  const std::string root_name = kRootName;
  plan.schedule = {
      entry("forward", "pre_forward", root_name, 0, {root_name}, {root_name}, {}, {}, 96),
      entry("forward", "pre_forward", "layers.0", 0, {"layers.0"}, {"layers.0"}, {}, {}, 160),
      entry("forward", "post_forward", "layers.0", 0, {}, {}, {"layers.0"}, {}, 160),
      entry("forward", "pre_forward", "layers.1", 0, {"layers.1"}, {"layers.1"}, {}, {}, 224),
      // Stays gathered between its two back-to-back calls.
      entry("forward", "post_forward", "layers.1", 0, {}, {}, {}, {}, 224),
      entry("forward", "pre_forward", "layers.1", 1, {}, {}, {}, {}, 224),
      entry("forward", "post_forward", "layers.1", 1, {}, {}, {"layers.1"}, {}, 224),
      entry("forward", "post_forward", root_name, 0, {}, {}, {}, {}, 96),
      entry("backward", "pre_backward", root_name, 0, {}, {}, {}, {}, 96),
      entry("backward", "pre_backward", "layers.1", 1, {"layers.1"}, {"layers.1"}, {}, {}, 224),
      entry("backward", "post_backward", "layers.1", 1, {}, {}, {}, {}, 224),
      entry("backward", "pre_backward", "layers.1", 0, {}, {}, {}, {}, 224),
      // Call 0 is the last backward visit: its gradient is complete here.
      entry("backward", "post_backward", "layers.1", 0, {}, {}, {"layers.1"}, {"layers.1"}, 224),
      entry("backward", "pre_backward", "layers.0", 0, {"layers.0"}, {"layers.0"}, {}, {}, 160),
      entry("backward", "post_backward", "layers.0", 0, {}, {}, {"layers.0"}, {}, 160),
      entry("backward", "post_backward", root_name, 0, {}, {}, {root_name}, {root_name}, 96),
      {"backward", "end_of_backward", std::nullopt, 0, {}, {}, {}, {}, 0},
  };

  plan.memory.sharded_param_bytes = 272;  // 80 + 64 + 128
  plan.memory.sharded_grad_bytes = 192;   // float32 shards: <root> 16 × 4 + layers.1 32 × 4
  plan.memory.peak_unsharded_bytes = 224;
  plan.memory.peak_at = "pre_forward layers.1";  // schedule[3], the first entry at 224
  // Lifetimes: <root> [0, 15]; layers.0 [1, 2] and [13, 14]; layers.1 [3, 6] and [9, 12].
  // The two layers never overlap, so they share a slot as large as the larger of them.
  plan.memory.slots = {{0, 96, {kRootName}}, {1, 128, {"layers.0", "layers.1"}}};
  plan.memory.slot_bytes = 224;

  // All-gathers at schedule[0, 1, 3, 9, 13]: 96 + 64 + 128 + 128 + 64.
  plan.communication.all_gather_count = 5;
  plan.communication.all_gather_bytes = 480;
  // Reduce-scatters of the float32 groups: layers.1 64 × 4 + <root> 32 × 4.
  plan.communication.reduce_scatter_count = 2;
  plan.communication.reduce_scatter_bytes = 384;
  // Two replicas all-reduce the gradient shards: layers.1 32 × 4 + <root> 16 × 4.
  plan.communication.all_reduce_bytes = 192;

  plan.diagnostics = {
      {"info", "ownership.tied", "head.weight is also registered as embed.weight", "head.weight"}};
  return plan;
}

std::vector<std::string> problem_lines(const std::vector<Problem>& problems) {
  std::vector<std::string> lines;
  for (const Problem& problem : problems) lines.push_back(problem.str());
  return lines;
}

}  // namespace mfsdp::schema
