#pragma once
// `mfsdp plan --trace-input`: one forward and backward of the model on example inputs, with its
// units instrumented (planner/torchscript/instrumentation.h), to record the order the units really
// run in (which branch an `if` takes, how often a loop turns), how long each takes and how
// many tensor bytes are alive at each unit boundary (planner/torchscript/host_memory.h counts
// them). derive_orders then uses the traced order instead of its static estimate, and
// predict_activations the memory. No LibTorch types here.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/torchscript/op_work.h"

namespace mfsdp::planner {

// Where the traced step runs. kCpu: on real values, timed. kMeta: on meta tensors, which
// carry shapes and dtypes but no values, so nothing is computed or timed and any model size
// traces in moments (a skeleton too); the bytes are counted as on the CPU and each unit's
// work (op_work.h) is counted from the shapes.
enum class TraceDevice { kCpu, kMeta };
const char* trace_device_name(TraceDevice device);  // "cpu", "meta"

// How a meta trace runs scaled-dot-product attention. kAsTraced: as LibTorch does here (its
// math form, the scores saved). kFused: as a GPU's fused kernel does (fused_attention.h):
// what `mfsdp plan --fused-attention` asks for, meta traces only.
enum class Attention { kAsTraced, kFused };
// Why kFused needs a meta trace: the one line both the CLI and trace_units refuse it with.
inline constexpr const char* kFusedAttentionNeedsMeta =
    "--fused-attention models a GPU's attention kernel in a shape-only trace; add "
    "--trace-device meta (a CPU trace runs attention as LibTorch does here)";

// One example input: a tensor of `shape` and `dtype` (a schema dtype name).
struct TraceInput {
  std::string spec;  // as given, e.g. "2x64:int64"
  std::vector<int64_t> shape;
  std::string dtype = "float32";
};

// The largest example input: a sample batch, not a training set.
inline constexpr int64_t kMaxTraceInputBytes = int64_t{1} << 30;

// Parses SHAPE[:DTYPE], e.g. "2x64:int64" or "8x3x32x32" (float32): dimensions >= 1 joined by
// 'x' or ',' ("8,3,32,32"), at most kMaxTraceInputBytes in all. Throws Error(kUsage), one line
// naming the spec and the expected form or the limit.
TraceInput parse_trace_input(const std::string& spec);

// A unit's forward boundary as the hooks saw it: entering (pre_forward) or leaving
// (post_forward) unit `unit`.
struct TracedEvent {
  bool enter = true;
  int unit = -1;
};

// CPU tensor bytes above what was alive when forward began: alive at a unit boundary, and the
// most alive at once from it up to the next boundary.
struct TracedBytes {
  int64_t live = 0;
  int64_t peak = 0;
};

// What one traced step observed. Units are indices into `units`.
struct TracedRun {
  std::vector<std::string> inputs;              // the specs as given
  std::vector<std::vector<std::string>> units;  // per unit, its module paths ("" for the model)
  std::vector<bool> checkpointed;    // per unit: its calls ran checkpointed (missing: false)
  std::vector<TracedEvent> forward;  // every pre_forward and post_forward, in order
  std::vector<int> backward;         // every pre_backward, in order (one per call that got one)
  // Per unit, in milliseconds, not rounded. forward: Σ over its calls of pre_forward to
  // post_forward, nested units included. backward: Σ over its pre_backwards of the time to the
  // next pre_backward of any unit, or to the end of backward; the end of a unit's own backward
  // is not observable (the hooks are identities on its outputs).
  std::vector<double> forward_ms;
  std::vector<double> backward_ms;
  // Forward split at the boundaries: Σ over its calls of the time from its pre_forward
  // (post_forward) to the next forward boundary of any unit or forward's end. The model's code
  // before the first boundary counts as the first unit's pre_forward time, so the splits sum
  // to the whole forward. loss_ms: forward's end to the first pre_backward.
  std::vector<double> pre_forward_ms;
  std::vector<double> post_forward_ms;
  double loss_ms = 0;
  // The steps the times are each field's median of: the first step alone when 1 (it also
  // measured the memory), else that many steps run after the first.
  int timed_steps = 1;
  // planner::reference_gflops() right after the steps, in this process: what calibrates the
  // times to another machine (docs/predict.md).
  double calibration_gflops = 0;
  int threads = 1;  // LibTorch's intra-op threads while it ran
  // Memory, for `batch` samples (the first input's first dimension). forward_bytes and
  // backward_bytes parallel `forward` and `backward`, loss_bytes is forward's return; each
  // boundary's peak is the most alive until the next boundary (the last pre_backward's: until
  // backward ends), so the interval after a pre_backward is that unit's backward and the one
  // after forward's return the loss. A unit's parameter gradients count through the next
  // unit's backward, as the executor's reduce-scatter holds them beside it, and are freed at
  // the pre_backward after that. output_bytes: forward's
  // outputs that require grad. A run without bytes (both lists empty) measured no memory.
  int64_t batch = 1;
  std::vector<TracedBytes> forward_bytes;
  TracedBytes loss_bytes;
  std::vector<TracedBytes> backward_bytes;
  int64_t output_bytes = 0;
  // The loss the step ran: "cross_entropy" when forward returned one floating tensor of two
  // or more dims (logits; mfsdp run's default loss, against class 0), else "sum" (of every
  // floating output that requires grad).
  std::string loss;
  // Where it ran. A meta trace has no times (every time field is 0, timed_steps 1, no
  // calibration) and has the work: per unit, what its forward segments and its backward
  // segment ran, split as the times are (pre_forward_ms, post_forward_ms, backward_ms), and
  // loss_work from forward's end to the first pre_backward (the loss, and its backward).
  TraceDevice device = TraceDevice::kCpu;
  Attention attention = Attention::kAsTraced;
  std::vector<PhaseWork> pre_forward_work, post_forward_work, backward_work;
  PhaseWork loss_work;
};

// Loads `model_path` afresh on the CPU, instruments the modules at `unit_paths` (unit i is
// unit_paths[i]), runs forward on one tensor per input (floating: standard normal values from
// a generator seeded with the input's position, 0, 1, ...; integer and bool: zeros, a valid
// index for any embedding), computes the loss (TracedRun::loss) and runs backward, counting
// CPU tensor bytes throughout (host_memory::install() replaces the process's CPU allocator).
// Throws Error(kUsage) when the inputs do not match forward's arguments (too many, too few,
// or an argument that is not a Tensor) or an input's tensor cannot be allocated, Error(kModel)
// naming the inputs and the interpreter's message when forward or backward fails, or when no output
// requires grad, and instrument_units' Error(kPlanning) for a unit it cannot hook.
// `param_dtype` (a schema dtype name, none: as stored) is the plan's policy.param_dtype: the
// floating parameters are cast to it and each unit's floating inputs too, as the executor's
// mixed precision does, so that the activations are measured in the dtype they will have.
// Units with `checkpointed[i]` run under activation checkpointing, as in the run, so the
// memory measured is what they keep and what their recompute in backward needs.
// `timed_steps` >= 2 runs that many more steps after the first (same inputs, fresh hooks,
// no memory counted) and takes the median times from them, so that the first step's one-off
// costs (allocations, first-call dispatch) stay out; kAutoTimedSteps runs at least
// kAutoMinSteps and more until they took kAutoSeconds (at most kAutoMaxSteps), so that a short
// step's median rests on enough samples. Then it measures calibration_gflops.
// `device` kMeta runs the one step on meta tensors instead (TracedRun::device): the model's
// tensors become meta tensors of their shapes (a skeleton traces too), the inputs are meta
// tensors, `timed_steps` is ignored, and an operator this LibTorch has no meta kernel for
// fails with Error(kModel) naming it and the CPU trace as the way out. `attention` kFused
// (meta only, else Error(kUsage)) runs attention as a fused GPU kernel does.
inline constexpr int kAutoTimedSteps = 0;
inline constexpr int kAutoMinSteps = 3, kAutoMaxSteps = 50;
inline constexpr double kAutoSeconds = 0.5;

TracedRun trace_units(const std::string& model_path, const std::vector<std::string>& unit_paths,
                      const std::vector<TraceInput>& inputs,
                      const std::optional<std::string>& param_dtype = std::nullopt,
                      const std::vector<bool>& checkpointed = {}, int timed_steps = 1,
                      TraceDevice device = TraceDevice::kCpu,
                      Attention attention = Attention::kAsTraced);
// The same for units of one or more modules: unit i is made of the modules at
// `unit_modules[i]` (instrument_unit_modules), and the run's `units` are these lists.
TracedRun trace_unit_modules(const std::string& model_path,
                             const std::vector<std::vector<std::string>>& unit_modules,
                             const std::vector<TraceInput>& inputs,
                             const std::optional<std::string>& param_dtype = std::nullopt,
                             const std::vector<bool>& checkpointed = {}, int timed_steps = 1,
                             TraceDevice device = TraceDevice::kCpu,
                             Attention attention = Attention::kAsTraced);

}  // namespace mfsdp::planner
