#pragma once
// The executor's entry point: everything a rank needs to train by a plan, created before the
// first forward (nothing lazy in a hook). Construction loads and validates the plan and the
// model, meets the other ranks, checks that every rank has the same plan and model, creates
// the streams and communicators, allocates the plan's static slots, shards the parameters
// and instruments the model. Then:
//
//   auto ctx = Context::create("model.plan.json", "model.pt", LaunchEnv::from_environment());
//   for (int m = 0; m < microbatches; ++m) {
//     microbatch(*ctx, m + 1 == microbatches);
//     at::Tensor loss = compute_loss(ctx->model().forward({inputs[m]})) / microbatches;
//     ctx->backward(loss);
//   }
//   optimizer.step();  // over ctx->sharded_parameters(); see train/sharded_optimizer.h
//   ctx->zero_grad();

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/script.h>

#include "executor/comm/launch_env.h"
#include "schema/plan.h"

namespace mfsdp::executor {

struct ContextOptions {
  // Any collective that takes longer fails the step (no silent hang).
  std::chrono::milliseconds collective_timeout = std::chrono::minutes(30);
  // Fail, instead of warning, when the first microbatch skips a unit call the plan has (a
  // branch not taken). A unit that runs later than planned, or more often, always fails:
  // following it would need collectives the other ranks do not issue.
  bool strict_order = false;
  // Record a timeline (unit spans, collectives, waits) for a Chrome/Perfetto trace; see
  // Context::timeline().
  bool record_timeline = false;
  // Where this rank trains: "cpu" (Gloo, host memory), "cuda" (the GPU that LOCAL_RANK picks,
  // NCCL, see docs/gpu.md) or "auto" (cuda when every rank can use a GPU, else cpu).
  // Context::device_description() says what was chosen and, for auto's cpu, why.
  std::string device = "cpu";
  // Initial parameter values from Hugging Face safetensors (a file, or a directory with
  // model.safetensors.index.json) instead of the model file's; empty: the model file's.
  // Context::weights_description() says what was read (docs/large-models.md).
  std::string init_from;
  // --name-map for init_from: how the file's tensor names become the model's (a JSON file of
  // rules, docs/large-models.md#name-maps); empty: the names are the model's.
  std::string name_map;
  // Initial parameter values from a rule instead ("normal:0.02", docs/large-models.md#
  // initialiser), seeded by init_seed; not with init_from. A skeleton's buffers get theirs by
  // name; a model file's keep the file's.
  std::string init;
  uint64_t init_seed = 0;
  // A checkpoint will overwrite every shard and buffer once the context exists (--resume found
  // one): a skeleton then needs no other source, and its values are not computed or read.
  bool weights_from_checkpoint = false;
};

struct ContextStats {
  int64_t sharded_param_bytes = 0;       // persistent master shards on this rank
  int64_t sharded_grad_bytes = 0;        // persistent main-gradient shards on this rank
  int64_t slot_bytes = 0;                // static buffers for unsharded parameters
  int64_t peak_unsharded_bytes = 0;      // most bytes of gathered units live at once, measured
  std::vector<std::string> divergences;  // where the first microbatch left the plan's order
  // Time compute spent blocked on collectives (all-gathers not yet done, the reduce-scatter
  // stream at the end of backward), summed since the context was created: communication that
  // prefetching did not hide. On the CPU the compute thread's blocked time; on a GPU the
  // compute stream's stalls, measured by timing events (waits whose events have completed).
  int64_t exposed_comm_us = 0;
  // Memory beyond the plan's buffers (docs/run.md, "Memory"). The process's RSS when create()
  // began, before the model was loaded; the model file's bytes set-up read (buffers, small
  // tensors and this rank's slice of each parameter: the file is mapped, not read, docs/
  // large-models.md); the RSS high-water mark
  // when create() returned. Then the most bytes one microbatch's forward and backward held
  // above what was alive when it began: activations, and gradients on their way to the
  // reduce-scatter (CPU tensors counted by host_memory.h; on a GPU, LibTorch's caching
  // allocator's count on the device).
  int64_t runtime_base_rss_bytes = 0;
  int64_t runtime_base_file_rss_bytes = 0;  // the part of it backed by files (code)
  int64_t model_bytes = 0;
  int64_t setup_peak_rss_bytes = 0;
  int64_t activation_peak_bytes = 0;
  // Freed mid-size blocks the CPU allocator kept for reuse at that peak's moment (0 on GPUs).
  int64_t activation_peak_cached_bytes = 0;
  // malloc's bytes for objects other than tensors at the base (host_memory.h).
  int64_t runtime_base_heap_object_bytes = 0;
};

class Timeline;

class Context {
 public:
  static std::unique_ptr<Context> create(const std::string& plan_path,
                                         const std::string& model_path, const LaunchEnv& env,
                                         ContextOptions options = {});
  ~Context();

  torch::jit::Module& model();
  // model().forward(inputs), except that a failure inside the executor's hooks comes out as
  // the original mfsdp::Error (with its exit code) rather than the interpreter's wrapper.
  c10::IValue forward(std::vector<c10::IValue> inputs);
  const schema::Plan& plan() const;
  const std::string& model_path() const;  // the file create() loaded the model from
  int rank() const;
  int world_size() const;
  // Where parameters, gradients and the model's computation live: feed inputs on it.
  at::Device device() const;
  // "cpu", or "cuda:0 (NVIDIA H200, PCI ...)"; for an auto choice of cpu, also why.
  const std::string& device_description() const;
  // Where the initial parameters came from: "the model file", the --init-from file (its
  // tensor count and dtype conversions), the --init rule (what it gave), or "the checkpoint".
  const std::string& weights_description() const;
  // Whether the model file is a skeleton (saved from the meta device, no values): its values
  // came from elsewhere, and nothing can be read from the file (no --save-model from it).
  bool model_is_skeleton() const;

  // Gradient accumulation: call before each microbatch's forward. Plain FSDP reduce-scatters
  // into the sharded main gradients every microbatch; HSDP also all-reduces them across
  // replicas after the last one.
  void microbatch(bool is_last);
  // loss.backward(), then the end of backward: remaining reduce-scatters (zeros for units
  // that got no gradient) and, after the last microbatch, a wait for the reduce-scatter
  // stream (an earlier microbatch's reduce-scatters run on under the next one's forward).
  void backward(const at::Tensor& loss);
  // A forward without backward (evaluation), under no-grad: units are gathered in the plan's
  // forward order and every unit is resharded when it returns. Call between training
  // microbatches, never inside one; set the model's train/eval mode yourself.
  c10::IValue evaluate(std::vector<c10::IValue> inputs);

  // One tensor per trainable group of every unit: this rank's master shard, whose grad is the
  // group's sharded main gradient (valid after backward()). Hand these to an optimizer.
  std::vector<at::Tensor> sharded_parameters();
  // Points each sharded parameter's grad at its main gradient (converted when the master is
  // stored in another dtype). Optimizers call it before stepping. Waits (host) for the
  // gradient reductions in flight and throws the failure of any, so that a failed collective
  // never reaches the masters.
  void sync_gradients();
  void zero_grad();
  // Scales the main gradients so that their global L2 norm is at most `max_norm`; returns
  // the norm before scaling.
  double clip_grad_norm(double max_norm);
  // Full parameter values by name (aliases included), gathered on every rank, on the CPU.
  std::map<std::string, at::Tensor> full_parameters();

  // An all-reduce mean over all ranks of a scalar, for reporting (e.g. the loss).
  double mean_over_ranks(double value);

  // Every rank contributes `value`; all values in rank order, on every rank. Through the
  // rendezvous store, so it suits small payloads (reports, traces), not tensors.
  std::vector<std::string> exchange(const std::string& key, const std::string& value);

  ContextStats stats() const;
  // The timeline when ContextOptions::record_timeline is set, else nullptr. Callers may add
  // spans of their own (a training loop's optimizer step).
  Timeline* timeline();

  // The state behind the facade, opaque here (executor/runtime/context_impl.h).
  struct Impl;

 private:
  friend struct Impl;  // builds the context once create()'s steps have run
  explicit Context(std::unique_ptr<Impl> impl);
  // After any failure the context refuses further work with the first error, rather than
  // continuing from a half-finished microbatch.
  void check_usable() const;
  std::unique_ptr<Impl> impl_;
};

// Megatron-FSDP's spelling: the last-microbatch state lives on the context.
inline void microbatch(Context& context, bool is_last) {
  context.microbatch(is_last);
}

}  // namespace mfsdp::executor
