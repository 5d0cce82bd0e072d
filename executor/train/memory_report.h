#pragma once
// Where a rank's memory went during `mfsdp run` (docs/run.md, "Memory"): the runtime's own
// base, the plan's per-rank state, the transients of a step, and what none of those explain.
// Rank 0 prints one row per rank at the end; each rank writes its own to the metrics file.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mfsdp::executor {

struct MemoryBreakdown {
  int rank = 0;
  // "cpu", or "cuda": then params, grads, optimizer, slots and activations are device memory
  // (activations from LibTorch's caching allocator), the RSS fields are the host's, and
  // there is no "other" (the host's RSS does not hold the device's state).
  std::string device = "cpu";
  int64_t runtime_base = 0;     // RSS after LibTorch started, before the model loaded
  int64_t model_as_loaded = 0;  // bytes of the model file set-up read: buffers, slices
  int64_t setup_peak_rss = 0;   // RSS high-water mark of set-up (load, shard, connect)
  int64_t sharded_params = 0;
  int64_t main_grads = 0;
  int64_t optimizer_state = 0;
  int64_t slots = 0;                // the plan's buffers for gathered units
  int64_t activation_peak = 0;      // the most one microbatch's forward and backward held
  int64_t optimizer_step_peak = 0;  // the most the optimizer step's temporaries held
  // Code and read-only data of LibTorch and the other libraries paged in after the base
  // (growth of the file-backed RSS, read at the end: the first step's kernels, the
  // interpreter, Gloo), which a model of any size pays once.
  int64_t code = 0;
  // Freed mid-size tensor blocks the allocator kept for reuse, at the moment of the larger
  // transient's peak (host_memory.h).
  int64_t cache = 0;
  // malloc's bytes for everything but tensors, added since the base and alive at the end: the
  // TorchScript module's code and graphs, the interpreter's and autograd's structures, the
  // communicators' buffers.
  int64_t heap_objects = 0;
  int64_t peak_rss = 0;  // RSS high-water mark of training (after set-up)

  // The two transients never coexist: activations are gone before the optimizer steps.
  int64_t transient() const;
  // Base + persistent state + the larger transient + cache + code + heap objects: what the
  // peak should be.
  int64_t accounted() const;
  // Peak RSS less what is accounted for: allocator overhead, code, anything unexplained.
  int64_t other() const;
  // The larger of the set-up and training peaks.
  int64_t process_peak_rss() const;

  nlohmann::json to_json() const;
  static MemoryBreakdown from_json(const nlohmann::json& j);
};

// One header and one row per rank, in MiB, with "other" as a share of the peak above the base;
// on GPUs the device's columns only, and the host's peak RSS.
std::string memory_table(const std::vector<MemoryBreakdown>& ranks);

}  // namespace mfsdp::executor
