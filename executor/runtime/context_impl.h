#pragma once
// The context's state, private to its files (executor/README.md):
//   context.cpp            the facade: forward, backward, evaluate, microbatch, accessors
//   context_schedule.cpp   the unit hooks and what they do: the plan's gathers, waits and
//                          reshards, binding, gradients and reduce-scatters, end of backward
//   context_create.cpp     construction, one named step per function
//   context_gradients.cpp  gradient operations (sync, zero, clip), full parameters, stats

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/script.h>

#include "executor/comm/rendezvous.h"
#include "executor/runtime/context.h"
#include "executor/runtime/context_phase.h"
#include "executor/runtime/flat_group.h"
#include "executor/runtime/initial_weights.h"
#include "executor/runtime/initializer.h"
#include "executor/runtime/param_binding.h"
#include "executor/runtime/runtime.h"
#include "executor/runtime/timeline.h"
#include "executor/runtime/unit_runtime.h"
#include "executor/runtime/unit_state.h"
#include "planner/torchscript/unit_hooks.h"
#include "schema/error.h"
#include "schema/plan.h"
#include "schema/schedule_cursor.h"

namespace mfsdp::executor {

using schema::Point;
using schema::ReduceScatterOrder;
using schema::ScheduleAction;
using schema::ScheduleCursor;

// How Context::create makes the runtime: make_runtime(), or a fake one in tests.
using RuntimeFactory = std::function<std::unique_ptr<Runtime>(const schema::Plan&, const LaunchEnv&,
                                                              Rendezvous&, const RuntimeOptions&)>;

// Context::create with the runtime `make` returns instead of make_runtime()'s: every other
// step is the same. tests/executor/runtime/context_test.cpp drives a context through a
// recording runtime this way, in one process.
std::unique_ptr<Context> create_context(const std::string& plan_path, const std::string& model_path,
                                        const LaunchEnv& env, ContextOptions options,
                                        const RuntimeFactory& make);

// After a failure: Error with the first error's code, "this context failed earlier and cannot
// continue: <its message>".
[[noreturn]] void rethrow_failure(const std::exception_ptr& error);

struct Context::Impl : planner::UnitHooks {
  ContextOptions options;
  schema::Plan plan;
  torch::jit::Module module;
  std::string model_path;                    // as create() was given it
  std::unique_ptr<InitialWeights> init;      // --init-from, during create() only
  std::unique_ptr<Initializer> initializer;  // --init, during create() only
  std::string weights_description = "the model file";
  bool skeleton = false;     // the model file holds no values (docs/large-models.md)
  std::string model_digest;  // its zip directory's, as it was loaded
  std::unique_ptr<Rendezvous> rendezvous;
  int rank = 0;
  int shard_rank = 0;  // within the shard group: rank = replica * shard_size + shard_rank
  // The device: streams, communicators and the plan's slots. The raw pointers are its.
  std::unique_ptr<Runtime> runtime;
  at::Device device = at::kCPU;
  Stream* ag_stream = nullptr;
  Stream* reduce_stream = nullptr;  // reduce_scatter, or ag_stream under a unified-stream plan
  Communicator* ag_comm = nullptr;
  Communicator* replica_comm = nullptr;  // HSDP only
  std::vector<UnitRuntime> units;
  std::unique_ptr<ScheduleCursor> cursor;
  std::unique_ptr<ReduceScatterOrder> rs_order;
  planner::UnitHooks* previous_hooks = nullptr;

  ContextPhase phase;
  bool is_last_microbatch = true;
  int microbatches_seen = 0;
  // A hook's error, kept because the TorchScript interpreter rethrows it as a plain
  // runtime_error; Context::forward rethrows this one with its exit code.
  std::exception_ptr pending_error;
  std::vector<std::string> divergences;
  std::unique_ptr<Timeline> timeline;  // when recording

  // Memory: slot bytes holding gathered units now and at most; ContextStats' counters.
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t base_rss = 0, base_file_rss = 0, model_bytes = 0, setup_peak_rss = 0;
  int64_t base_heap_objects = 0;
  int64_t microbatch_start_bytes = 0;  // tensor bytes alive when this microbatch began
  int64_t activation_peak = 0;         // the most any microbatch held above that
  int64_t activation_peak_cached = 0;  // the allocator's reuse cache at that moment

  ~Impl() override;

  // The context over this state, once create()'s steps have filled it.
  static std::unique_ptr<Context> wrap(std::unique_ptr<Impl> impl) {
    return std::unique_ptr<Context>(new Context(std::move(impl)));
  }

  at::TensorOptions on_device(at::ScalarType dtype) const {
    return at::TensorOptions().dtype(dtype).device(device);
  }
  const std::string& name(int u) const { return units[u].plan->name; }

  // --- context_schedule.cpp --------------------------------------------------------------
  // UnitHooks, called from the instrumented graphs.
  void pre_forward(int u) override;
  const char* input_dtype(int u) override;
  void post_forward(int u) override;
  void pre_backward(int u) override;
  bool checkpointed(int u) override { return units[u].plan->checkpoint; }

  // The bookkeeping of a microbatch's (or an evaluation's) start: counters, cursor.
  void begin_microbatch();
  void enter_backward(int u);
  void perform(const std::vector<ScheduleAction>& actions);
  void issue_all_gather(int u);
  void wait_for_gather(int u);
  void reshard(int u);
  void bind(int u);
  void on_gradient(int u, int g, std::vector<at::Tensor>&& grads);
  void on_early_gradient(int u, int g, size_t p, at::Tensor&& gradient);
  void issue_reduce_scatter(int u);
  void wait_for_reductions();
  void end_of_backward();
  void end_of_evaluation();
  void settle_units();
  void report_order(const std::vector<std::string>& found);

  // Runs a hook's body; an error is named with this rank, kept in pending_error and fails
  // the context before it propagates.
  template <typename F>
  void remembering_errors(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      const std::string prefix = "rank " + std::to_string(rank) + ": ";
      const std::string what = e.what();
      const Error named(e.code(), what.rfind(prefix, 0) == 0 ? what : prefix + what);
      if (!pending_error) pending_error = std::make_exception_ptr(named);
      phase.fail(pending_error);
      throw named;
    } catch (...) {
      if (!pending_error) pending_error = std::current_exception();
      phase.fail(pending_error);
      throw;
    }
  }
};

}  // namespace mfsdp::executor
