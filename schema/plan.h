#pragma once
// In-memory form of a plan file (`"schema": "mfsdp.plan/1"`). Plain data, no LibTorch, so the
// planner writes it, and `validate`/`show`/`diff` and the executor read it, without loading a
// model. Units and parameters are referred to by name so a diff of two plans reads like a review.
// The meaning of every field is documented in docs/plan-format.md.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp::schema {

inline constexpr const char* kPlanSchemaVersion = "mfsdp.plan/1";
// The name a unit or module path "" (the model itself) is printed as.
inline constexpr const char* kRootName = "<root>";
// Joins the module paths of a merged unit into its name: "layers.0+layers.1". TorchScript
// module names are identifiers, so no module path holds it.
inline constexpr char kModuleJoiner = '+';

// Bytes per element of a dtype name ("float32", "bfloat16", "int64", ...); throws mfsdp::Error
// for an unknown name. `dtype_names()` lists the accepted ones.
int64_t dtype_size(const std::string& dtype);
bool is_floating_dtype(const std::string& dtype);
const std::vector<std::string>& dtype_names();

struct Unit;
// The module paths a unit is made of: its `modules`, or its name.
std::vector<std::string> unit_modules(const Unit& unit);
// The name of a unit made of `paths` (module paths, "" or kRootName for the model).
std::string unit_name_of(const std::vector<std::string>& paths);

struct ModelInfo {
  std::string path;             // as given on the command line
  std::string sha256;           // of the file's bytes
  std::string structural_hash;  // sha256 of module tree + parameter/buffer names, shapes, dtypes
  int64_t modules = 0;
  int64_t parameters = 0;  // distinct parameter tensors (tied weights count once)
  int64_t parameter_numel = 0;
};

struct Mesh {
  int64_t world_size = 1;
  int64_t shard_size = 1;      // ranks one flat buffer is split across
  int64_t replicate_size = 1;  // HSDP replicas; world_size == shard_size * replicate_size
};

struct Policy {
  std::optional<std::string>
      param_dtype;                       // dtype of unsharded floating parameters; none: as stored
  std::string reduce_dtype = "float32";  // dtype of gradient reduce-scatter and main grads
  bool reshard_after_forward = true;
  int64_t forward_prefetch = 1;       // all-gathers issued ahead of the running unit in forward
  int64_t backward_prefetch = 1;      // same, in backward
  int64_t resident_budget_bytes = 0;  // cap on live unsharded bytes; 0 = no cap
  bool unified_stream = false;        // one stream for all collectives instead of two
  int64_t align_bytes = 16;           // parameter offsets and shard boundaries align to this
};

// Upper bounds of every plan (docs/plan-format.md#limits). Ranks are 32-bit ints in Gloo and
// NCCL. With an alignment of at most 1 GiB, shard_size × alignment elements stays below 2^61, so
// padding a group cannot overflow by itself.
inline constexpr int64_t kMaxWorldSize = 2147483647;
inline constexpr int64_t kMaxAlignBytes = int64_t{1} << 30;
// Every group's bytes are a multiple of this, so groups packed back to back in a slot keep
// 16-byte alignment for fp32 and bf16 data and NCCL buffers (docs/plan-format.md#limits).
inline constexpr int64_t kMinAlignBytes = 16;

struct Stream {
  std::string name;                      // "all_gather", "reduce_scatter" or "unified"
  std::vector<std::string> collectives;  // collective kinds issued on it
};

struct ParamLayout {
  std::string name;  // fully-qualified parameter name (first registration in definition order)
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t offset = 0;                // element offset in the group's flat buffer
  std::vector<std::string> aliases;  // other names of the same tensor (tied weights)
};

struct Group {
  std::string dtype;  // storage dtype of the parameters
  bool requires_grad = true;
  int64_t numel = 0;         // end of the last parameter, alignment gaps included
  int64_t padded_numel = 0;  // numel rounded up so it splits evenly and aligned across shards
  int64_t shard_numel =
      0;  // padded_numel / shard_size; shard rank r owns [r*shard_numel, +shard_numel)
  std::vector<ParamLayout> params;
};

struct BufferInfo {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
};

struct Unit {
  std::string name;  // module path, kRootName for the model; a merged unit's modules joined by '+'
  std::string type;  // TorchScript qualified class name; a merged unit's, joined by '+'
  // A merged unit (FSDP2's fully_shard([a, b])): its modules, two or more, in definition
  // order; they run one after another, each once per call of the unit. Written only then;
  // empty for a unit of one module.
  std::vector<std::string> modules;
  std::optional<std::string> parent;  // nearest enclosing unit
  bool root = false;
  int64_t call_count = 0;           // static call sites reached from forward (traced: calls made)
  bool conditional = false;         // a call sits under prim::If
  bool repeated = false;            // a call sits under prim::Loop
  bool kept_after_forward = false;  // not resharded after forward (first needed in backward)
  // Activation checkpointing: its forward keeps nothing for backward and is recomputed at its
  // pre_backward, after that entry's waits. Written only when true.
  bool checkpoint = false;
  int64_t unsharded_bytes = 0;  // gathered size, in compute dtype, all groups
  int64_t sharded_bytes = 0;    // per rank, in storage dtype, all groups
  std::vector<Group> groups;
  std::vector<BufferInfo> buffers;  // recorded, not sharded
};

// One point of the per-microbatch schedule. The executor performs, in this order: issue the
// `all_gather`s, wait for the `wait`s, (run the unit), then `reshard` and `reduce_scatter`.
struct ScheduleEntry {
  std::string phase;  // "forward" | "backward"
  std::string point;  // "pre_forward" | "post_forward" | "pre_backward" | "post_backward" |
                      // "end_of_backward"
  std::optional<std::string> unit;  // none for end_of_backward
  int64_t call = 0;                 // which forward call of the unit (0-based)
  std::vector<std::string> all_gather;
  std::vector<std::string> wait;
  std::vector<std::string> reshard;
  std::vector<std::string> reduce_scatter;
  int64_t unsharded_bytes = 0;  // live unsharded bytes after the all-gathers, before reshards
};

struct Slot {
  int64_t index = 0;
  int64_t bytes = 0;
  std::vector<std::string> units;  // units whose unsharded buffers live in this slot
};

// A unit's activations in the traced step: the tensor bytes its forward left alive for
// backward (its calls summed, its nested units' own bytes not counted), for one microbatch.
struct UnitActivations {
  std::string unit;
  int64_t saved_bytes = 0;  // may be negative: a unit that frees more than it keeps
};

// Activation memory per rank for one microbatch, measured by `mfsdp plan --trace-input`
// (docs/plan-format.md#activations). CPU tensor bytes above what was alive when forward
// began: what autograd saved for backward, the outputs, and the gradients backward makes
// (parameter gradients counted until the next unit's backward begins, as the executor
// hands them to the reduce-scatter). Without a trace there is none: unknown, not zero.
struct Activations {
  int64_t microbatch = 0;  // samples the bytes are for: the traced batch (first input's dim 0)
  int64_t peak_bytes = 0;  // the most alive at once in forward and backward
  // The schedule point the peak follows: "pre_forward U", "post_forward U", "loss" (forward
  // returned, before the first pre_backward), "pre_backward U" or "end_of_backward".
  std::string peak_at;
  int64_t output_bytes = 0;  // the model's outputs that require grad, which the loss reads
  // The loss the traced step ran (its memory is in the peak): "cross_entropy" (forward
  // returned logits, one floating tensor of 2+ dims) or "sum" (of the outputs).
  std::string loss;
  // peak_bytes + sharded_param_bytes + sharded_grad_bytes + slot_bytes: the plan's memory per
  // rank at the activation peak, optimizer state not included.
  int64_t combined_peak_bytes = 0;
  std::vector<UnitActivations> units;  // every unit of forward_order, in that order
};

struct Memory {
  int64_t sharded_param_bytes = 0;  // per rank
  int64_t sharded_grad_bytes = 0;   // per rank, main grads in reduce dtype
  int64_t peak_unsharded_bytes = 0;
  std::string peak_at;  // schedule point where the peak first occurs, e.g. "pre_forward layers.3"
  int64_t slot_bytes = 0;  // sum of slot sizes: what the executor allocates once
  std::vector<Slot> slots;
  std::optional<Activations> activations;  // only with --trace-input
};

struct Communication {  // per microbatch, per rank
  int64_t all_gather_count = 0;
  int64_t all_gather_bytes = 0;  // unsharded bytes received by all-gathers
  int64_t reduce_scatter_count = 0;
  int64_t reduce_scatter_bytes = 0;  // unsharded gradient bytes fed to reduce-scatters
  int64_t all_reduce_bytes = 0;  // HSDP: sharded gradient bytes all-reduced across replicas, once
                                 // per optimizer step (after the last microbatch)
};

struct Diagnostic {
  std::string severity;  // "info" | "warning" | "error"
  std::string code;      // stable identifier, e.g. "ownership.hoisted"
  std::string message;
  std::string where;  // unit, module or parameter name
};

// Wall time of one unit in the traced step, in milliseconds rounded to 0.01.
struct UnitTime {
  std::string unit;
  double forward_ms = 0;   // Σ over its calls: pre_forward to post_forward (nested units included)
  double backward_ms = 0;  // Σ over its calls: its pre_backward to the next unit's, or to the end
  // Forward split at the unit boundaries (docs/plan-format.md#trace), Σ over its calls: from
  // its pre_forward (post_forward) to the next pre_forward or post_forward of any unit, or to
  // forward's end. Traces older than these fields have neither.
  std::optional<double> pre_forward_ms, post_forward_ms;
};

// The work of one stretch of a shape-only traced step, per op class
// (docs/plan-format.md#work): FLOPs, the tensor bytes its operators read and write, and how
// many operators did it (an analytic compute model sizes a kernel's efficiency by their mean).
struct ClassWork {
  int64_t flops = 0;
  int64_t bytes = 0;
  int64_t ops = 0;
  ClassWork& operator+=(const ClassWork& more) {
    flops += more.flops;
    bytes += more.bytes;
    ops += more.ops;
    return *this;
  }
};
struct Work {
  ClassWork matmul;       // products and convolutions: 2 FLOPs per multiply-add
  ClassWork attention;    // fused attention kernels (their two products)
  ClassWork elementwise;  // everything else that moves bytes (norms, activations, copies)
  ClassWork embedding;    // lookups: the rows they read; their backward: the table's gradient
  Work& operator+=(const Work& more) {
    matmul += more.matmul;
    attention += more.attention;
    elementwise += more.elementwise;
    embedding += more.embedding;
    return *this;
  }
  ClassWork total() const {  // every class together
    ClassWork all = matmul;
    all += attention;
    all += elementwise;
    all += embedding;
    return all;
  }
};
// A unit's work, split at the boundaries as the times are (UnitTime's pre_forward_ms,
// post_forward_ms and backward_ms).
struct UnitWork {
  std::string unit;
  Work pre_forward, post_forward, backward;
};

// What `mfsdp plan --trace-input` observed. Plans made without it have none, and their bytes are
// unchanged by this section's existence.
struct Trace {
  std::vector<std::string> inputs;  // the --trace-input specs as given, e.g. "2x64:int64"
  // Which of "units.call_count", "forward_order", "backward_order" (in that order) differ from
  // the static estimate; the plan holds the traced values either way.
  std::vector<std::string> differs_from_static;
  std::vector<UnitTime> times;  // every unit of forward_order, in that order
  // What predicting a step needs beside the unit times (docs/predict.md); older traces lack
  // them. loss_ms: from forward's end to the first pre_backward. timed_steps: the traced steps
  // the times are the median of (the first only warms up when there are more).
  // calibration_gflops: the reference matmul's throughput where the trace ran
  // (planner/torchscript/reference_compute.h).
  std::optional<double> loss_ms;
  std::optional<int64_t> timed_steps;
  std::optional<int64_t> threads;  // the intra-op threads the traced steps ran with
  std::optional<double> calibration_gflops;
  // Where the step ran: "meta" for a shape-only trace (`--trace-device meta`), none for the
  // CPU. A meta trace has no times (an empty list, and none of the step's times above) and
  // has the work instead: per unit of forward_order, in that order, and loss_work, from
  // forward's end to the first pre_backward.
  std::optional<std::string> device;
  // "fused" when the meta trace ran attention as a GPU's fused kernel does
  // (`--fused-attention`); none: as LibTorch ran it.
  std::optional<std::string> attention;
  std::vector<UnitWork> work;
  std::optional<Work> loss_work;
};

// Training defaults for `mfsdp run`, written by `mfsdp plan --training FILE` (or a scope file's
// "training" object). Every field is optional; run's flags win over them.
struct Training {
  std::optional<int64_t> steps;
  std::optional<int64_t> global_batch;
  std::optional<int64_t> microbatches;
  std::optional<std::string> optimizer;  // sgd | adam | adamw
  std::optional<double> lr;
  std::optional<double> weight_decay;
  std::optional<std::vector<double>> betas;  // two values in [0, 1)
  std::optional<double> momentum;
  std::optional<int64_t> warmup;
  std::optional<std::string> lr_schedule;  // constant | cosine
  std::optional<double> clip_grad_norm;
  std::optional<std::string> loss;  // cross_entropy | mse | model
  std::optional<int64_t> seed;
};

// One training step of the plan as `mfsdp plan --profile` predicted it (docs/predict.md,
// docs/plan-format.md#prediction): on which profile, for which microbatches, and the result.
struct StepPrediction {
  std::string profile;  // the profile's name ("probe" for a measured one)
  int64_t microbatches = 1;
  int64_t microbatch_samples = 1;  // per rank
  std::string optimizer;           // sgd | adam | adamw
  double compute_scale = 1;        // the trace's times were multiplied by this
  double step_ms = 0;              // = compute_ms + exposed_comm_ms + contention_ms
  double compute_ms = 0;
  double exposed_comm_ms = 0;
  double contention_ms = 0;
  std::optional<int64_t> memory_bytes;  // a rank's peak (params, grads, optimizer, slots,
                                        // activations); none without traced activations
};

struct Plan {
  std::string schema = kPlanSchemaVersion;
  std::string generator;
  ModelInfo model;
  Mesh mesh;
  Policy policy;
  std::vector<Stream> streams;
  std::vector<Unit> units;
  std::vector<std::string> roots;
  std::vector<std::string> forward_order;
  std::vector<std::string> backward_order;
  std::vector<ScheduleEntry> schedule;
  Memory memory;
  Communication communication;
  std::vector<Diagnostic> diagnostics;
  std::optional<Trace> trace;                // only with --trace-input
  std::optional<StepPrediction> prediction;  // only with --profile
  std::optional<Training> training;  // only with --training (or a scope file's); written last
};

}  // namespace mfsdp::schema
