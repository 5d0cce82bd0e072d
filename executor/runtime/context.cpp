#include "executor/runtime/context.h"

#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "executor/runtime/flat_group.h"
#include "executor/runtime/host_memory.h"
#include "executor/runtime/runtime.h"
#include "executor/runtime/schedule_cursor.h"
#include "executor/runtime/timeline.h"
#include "executor/runtime/unit_state.h"
#include "planner/instrumentation.h"
#include "planner/model_loader.h"
#include "planner/torch_model.h"
#include "planner/unit_hooks.h"
#include "schema/digest.h"
#include "schema/error.h"
#include "schema/plan_check.h"
#include "schema/plan_json.h"

namespace mfsdp::executor {
namespace {

using ObjectPtr = c10::intrusive_ptr<c10::ivalue::Object>;

// Where a parameter lives in the TorchScript object graph, so it can be swapped.
struct ParamSlot {
  ObjectPtr owner;
  size_t slot = 0;
};

struct UnitRuntime {
  const schema::Unit* plan = nullptr;
  int slot = -1;
  std::vector<FlatGroup> groups;
  std::vector<std::vector<std::vector<ParamSlot>>> places;  // [group][param] -> registrations
  UnitState state = UnitState::kResting;
  bool bound = false;
  bool bound_this_microbatch = false;
  bool resident = false;  // its slot holds its gathered parameters
  std::shared_ptr<Event> gathered;
  // Per group, this microbatch: its parameters' gradients once the group has them all.
  std::vector<std::optional<std::vector<at::Tensor>>> grads;
  int grads_missing = 0;
  int64_t forward_start_us = 0, backward_start_us = 0;  // for the timeline
};

std::string plan_unit_path(const std::string& name) {
  return name == schema::kRootName ? "" : name;
}

schema::Plan load_plan(const std::string& path) {
  schema::ParseResult parsed = schema::read_plan_file(path);
  std::vector<schema::Problem> problems = parsed.problems;
  if (problems.empty()) problems = schema::check_plan(parsed.plan);
  if (!problems.empty()) {
    fail(ExitCode::kUsage,
         path + ": not a valid plan (" + problems.front().str() +
             (problems.size() > 1 ? "; and " + std::to_string(problems.size() - 1) + " more" : "") +
             "); run mfsdp validate " + path);
  }
  return parsed.plan;
}

}  // namespace

struct Context::Impl : planner::UnitHooks {
  ContextOptions options;
  schema::Plan plan;
  torch::jit::Module module;
  std::unique_ptr<Rendezvous> rendezvous;
  int rank = 0;
  int shard_rank = 0;
  int replica = 0;
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
  bool is_last_microbatch = true;
  bool in_step = false;       // a microbatch's forward has started
  bool backward_done = true;  // its end of backward has run
  bool callback_queued = false;
  int microbatches_seen = 0;
  int64_t live_bytes = 0;  // bytes of slot storage holding gathered units right now
  int64_t peak_bytes = 0;
  std::exception_ptr failure;  // the first error; the context is unusable after it
  std::vector<std::string> divergences;
  planner::UnitHooks* previous_hooks = nullptr;
  std::exception_ptr pending_error;
  std::unique_ptr<Timeline> timeline;  // when recording
  std::string model_path;              // as create() was given it
  int64_t base_rss = 0, base_file_rss = 0, model_bytes = 0, setup_peak_rss = 0;
  int64_t microbatch_start_bytes = 0;  // tensor bytes alive when this microbatch began
  int64_t activation_peak = 0;         // the most any microbatch held above that
  int64_t activation_peak_cached = 0;  // the allocator's reuse cache at that moment
  int64_t base_heap_objects = 0;
  bool evaluating = false;  // inside evaluate(): no backward follows

  ~Impl() override {
    planner::set_unit_hooks(previous_hooks);
    // Tensors that LibTorch's allocator knows to be in use on a GPU stream (gradients handed
    // to reduce-scatters) must be freed while that stream exists.
    units.clear();
    // Streams must stop before the buffers their work points at go away.
    runtime.reset();
  }

  at::TensorOptions on_device(at::ScalarType dtype) const {
    return at::TensorOptions().dtype(dtype).device(device);
  }

  const std::string& name(int u) const { return units[u].plan->name; }

  void start_microbatch_if_needed() {
    if (in_step) return;
    runtime->check_compute_stream("a microbatch's forward");
    in_step = true;
    backward_done = false;
    microbatch_start_bytes = runtime->tensor_bytes();
    runtime->reset_memory_peak();
    callback_queued = false;
    cursor->restart();
    rs_order->restart();
  }

  // --- UnitHooks: called from the instrumented graphs -----------------------------------
  // The TorchScript interpreter rethrows a hook's exception as a plain runtime_error; keep
  // the original so Context::forward can rethrow it with its exit code.
  template <typename F>
  void remembering_errors(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      const std::string prefix = "rank " + std::to_string(rank) + ": ";
      const std::string what = e.what();
      const Error named(e.code(), what.rfind(prefix, 0) == 0 ? what : prefix + what);
      if (!pending_error) pending_error = std::make_exception_ptr(named);
      if (!failure) failure = pending_error;
      throw named;
    } catch (...) {
      if (!pending_error) pending_error = std::current_exception();
      if (!failure) failure = pending_error;
      throw;
    }
  }

  void pre_forward(int u) override {
    remembering_errors([&] {
      if (in_step && cursor->in_backward()) {
        fail(ExitCode::kUsage,
             "unit " + name(u) +
                 " reached pre_forward after the plan's forward was complete: "
                 "either forward ran again before backward (call "
                 "ctx->backward(loss) after every forward, or use "
                 "ctx->evaluate() for a forward without backward) or the unit ran more often than "
                 "planned");
      }
      start_microbatch_if_needed();
      UnitRuntime& unit = units[u];
      transition(unit.state, UnitState::kForward, name(u));
      perform(cursor->on_event(Point::kPreForward, u));
      if (!unit.bound) bind(u);
      if (timeline) unit.forward_start_us = Timeline::now_us();
    });
  }

  // Mixed precision: a unit gathered in the plan's param dtype computes in it.
  const char* input_dtype(int) override {
    return plan.policy.param_dtype ? plan.policy.param_dtype->c_str() : nullptr;
  }

  void post_forward(int u) override {
    remembering_errors([&] {
      transition(units[u].state, UnitState::kResting, name(u));
      if (timeline) {
        timeline->record("compute", "forward " + name(u), units[u].forward_start_us,
                         Timeline::now_us());
      }
      perform(cursor->on_event(Point::kPostForward, u));
    });
  }

  void pre_backward(int u) override {
    remembering_errors([&] { enter_backward(u); });
  }

  void enter_backward(int u) {
    if (!callback_queued) {
      // The first unit to see gradients arranges the end of backward, like FSDP's root.
      callback_queued = true;
      torch::autograd::Engine::get_default_engine().queue_callback([this] { end_of_backward(); });
    }
    transition(units[u].state, UnitState::kBackward, name(u));
    perform(cursor->on_event(Point::kPreBackward, u));
    if (timeline) units[u].backward_start_us = Timeline::now_us();
  }

  // --- Schedule actions -----------------------------------------------------------------
  void perform(const std::vector<ScheduleAction>& actions) {
    for (const ScheduleAction& a : actions) {
      switch (a.kind) {
        case ScheduleAction::Kind::kAllGather:
          issue_all_gather(a.unit);
          break;
        case ScheduleAction::Kind::kWait:
          wait_for_gather(a.unit);
          break;
        case ScheduleAction::Kind::kReshard:
          reshard(a.unit);
          break;
      }
    }
  }

  void issue_all_gather(int u) {
    UnitRuntime& unit = units[u];
    // The inputs first (a cast to the compute dtype runs on compute), then on a GPU one wait
    // for them, which also orders the gather after the slot's previous occupant's last use.
    std::vector<const void*> inputs;
    for (FlatGroup& group : unit.groups) inputs.push_back(group.gather_input());
    runtime->after_compute(*ag_stream);
    for (size_t g = 0; g < unit.groups.size(); ++g) {
      FlatGroup& group = unit.groups[g];
      live_bytes += group.unsharded_bytes();
      ag_comm->all_gather(inputs[g], group.unsharded().data_ptr(),
                          group.shard_bytes_in_compute_dtype(),
                          "all-gather of " + name(u) + " group " + std::to_string(g));
    }
    unit.gathered = ag_stream->record();
    unit.resident = true;
    peak_bytes = std::max(peak_bytes, live_bytes);
  }

  // Compute waits for the unit's all-gather; the time it is held up is exposed
  // communication.
  void wait_for_gather(int u) {
    if (units[u].gathered)
      runtime->compute_waits_for(units[u].gathered, "all-gather of " + name(u));
  }

  void reshard(int u) {
    UnitRuntime& unit = units[u];
    // The slot may be reused right after: the all-gather into it must have finished. (On a
    // GPU the next all-gather into the slot runs on the same stream, after compute.)
    wait_for_gather(u);
    if (unit.resident) {
      for (const auto& group : unit.groups) live_bytes -= group.unsharded_bytes();
      unit.resident = false;
    }
    if (unit.bound) {
      for (size_t g = 0; g < unit.groups.size(); ++g) {
        const at::Tensor empty = at::empty({0}, on_device(unit.groups[g].compute_dtype()));
        for (const auto& registrations : unit.places[g]) {
          for (const ParamSlot& p : registrations) p.owner->setSlot(p.slot, empty);
        }
      }
      unit.bound = false;
    }
  }

  void bind(int u) {
    UnitRuntime& unit = units[u];
    // A second binding would register a second gradient hook and lose one gradient; plans
    // keep units called several times gathered between calls, so this is a bug if it fires.
    if (unit.bound_this_microbatch) {
      fail(ExitCode::kInternal, "unit " + name(u) + " was bound twice in one microbatch");
    }
    unit.bound_this_microbatch = true;
    unit.grads.assign(unit.groups.size(), std::nullopt);
    unit.grads_missing = 0;
    for (size_t g = 0; g < unit.groups.size(); ++g) {
      FlatGroup& group = unit.groups[g];
      FlatGroup::GradientHandler handler;
      FlatGroup::EarlyGradientHandler early;
      if (group.trainable() && !evaluating) {
        ++unit.grads_missing;
        handler = [this, u, g](std::vector<at::Tensor>&& grads) {
          on_gradient(u, static_cast<int>(g), std::move(grads));
        };
        early = [this, u, g](size_t p, at::Tensor&& gradient) {
          on_early_gradient(u, static_cast<int>(g), p, std::move(gradient));
        };
      }
      group.bind(std::move(handler), std::move(early));
      for (size_t p = 0; p < unit.places[g].size(); ++p) {
        for (const ParamSlot& place : unit.places[g][p])
          place.owner->setSlot(place.slot, group.param(p));
      }
    }
    unit.bound = true;
  }

  // --- Gradients ------------------------------------------------------------------------
  void on_gradient(int u, int g, std::vector<at::Tensor>&& grads) {
    UnitRuntime& unit = units[u];
    if (unit.grads[g]) {
      fail(ExitCode::kInternal, "unit " + name(u) + " group " + std::to_string(g) +
                                    " received its gradient twice in one backward");
    }
    unit.grads[g] = std::move(grads);
    if (--unit.grads_missing > 0) return;
    if (unit.state == UnitState::kBackward) transition(unit.state, UnitState::kResting, name(u));
    if (timeline && unit.backward_start_us) {
      timeline->record("compute", "backward " + name(u), unit.backward_start_us,
                       Timeline::now_us());
    }
    for (int w : rs_order->ready(u)) issue_reduce_scatter(w);
  }

  void issue_reduce_scatter(int u) {
    UnitRuntime& unit = units[u];
    for (size_t g = 0; g < unit.groups.size(); ++g) {
      FlatGroup& group = unit.groups[g];
      if (!group.trainable()) continue;
      const std::vector<at::Tensor> none;
      const bool arrived = g < unit.grads.size() && unit.grads[g];
      reduce_scatter_group(group, arrived ? *unit.grads[g] : none,
                           "reduce-scatter of " + name(u) + " group " + std::to_string(g));
      if (is_last_microbatch && replica_comm) {
        runtime->all_reduce(CommRole::kReplicas, group.main_grad(), ReduceOp::kAvg,
                            "all-reduce across replicas of " + name(u));
      }
    }
    unit.grads.assign(unit.groups.size(), std::nullopt);
  }

  // A tied parameter's gradient from its uses so far, while more are to come (FlatGroup's
  // early handler): reduce-scattered into the main gradient now instead of waiting beside
  // the next use's gradient. The unit's own reduce-scatter adds the rest.
  void on_early_gradient(int u, int g, size_t p, at::Tensor&& gradient) {
    FlatGroup& group = units[u].groups[g];
    std::vector<at::Tensor> grads(group.layout().params.size());
    grads[p] = std::move(gradient);
    reduce_scatter_group(group, grads,
                         "reduce-scatter of " + name(u) + " group " + std::to_string(g) +
                             " (early, for tied " + group.layout().params[p].name + ")");
  }

  // Averages `grads` (per parameter of the group, undefined: zero) over the shard group and
  // adds this rank's shard into the group's main gradient, on the reduce stream.
  void reduce_scatter_group(FlatGroup& group, const std::vector<at::Tensor>& grads,
                            const std::string& what) {
    runtime->reduce_scatter_gradients(group, grads, what);
  }

  // The end of backward's wait for the reduce stream (the optimizer reads the main
  // gradients), and failures so far are raised.
  void wait_for_reductions() {
    runtime->compute_waits_for(reduce_stream->record(), "reduce-scatters");
    runtime->check();
  }

  void end_of_backward() {
    if (backward_done) return;
    perform(cursor->finish());
    for (int w : rs_order->finish()) issue_reduce_scatter(w);
    wait_for_reductions();
    const int64_t peak = runtime->peak_tensor_bytes();
    if (peak - microbatch_start_bytes > activation_peak) {
      activation_peak = peak - microbatch_start_bytes;
      activation_peak_cached = runtime->cached_at_peak_bytes();
    }
    settle_units();
    if (microbatches_seen++ == 0) report_order(cursor->divergences());
    is_last_microbatch = true;
  }

  // After evaluate()'s forward: the forward entries left, then every unit resharded (no
  // backward will use what the plan keeps gathered).
  void end_of_evaluation() {
    perform(cursor->finish_forward());
    for (size_t u = 0; u < units.size(); ++u) reshard(static_cast<int>(u));
    settle_units();
    runtime->check();  // a failed all-gather would have left garbage in the output
  }

  void settle_units() {
    for (auto& unit : units) {
      unit.state = UnitState::kResting;
      for (auto& group : unit.groups) group.release();
      unit.grads.clear();
      unit.bound_this_microbatch = false;
      unit.backward_start_us = 0;
    }
    backward_done = true;
    in_step = false;
  }

  void report_order(const std::vector<std::string>& found) {
    if (found.empty()) return;
    divergences = found;
    std::string text =
        "rank " + std::to_string(rank) +
        ": the first microbatch's unit order differs from the plan: " + found.front() +
        (found.size() > 1 ? " (and " + std::to_string(found.size() - 1) + " more)" : "");
    if (options.strict_order) {
      fail(ExitCode::kRuntime, text +
                                   "; re-plan with the real unit order, or allow skipped "
                                   "calls (strict_order off)");
    }
    std::cerr << "mfsdp: warning: " << text << "; collectives still follow the plan\n";
  }
};

namespace {

// Every rank must run the same plan on the same model file (weights included): compared
// before the first collective.
void check_same_plan_everywhere(Rendezvous& rendezvous, const schema::Plan& plan,
                                const std::string& model_path) {
  const std::string mine =
      schema::sha256_hex(schema::dump_plan(plan)) + schema::sha256_file_hex(model_path);
  const std::vector<std::string> all = rendezvous.exchange("mfsdp/plan-check", mine);
  std::string differing;
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] != all[0]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!differing.empty()) {
    fail(ExitCode::kUsage, "rank(s) " + differing +
                               " were given a different plan or model than rank 0; give every "
                               "rank the same plan and model files");
  }
}

std::map<std::string, torch::jit::Module> modules_by_path(const torch::jit::Module& model) {
  std::map<std::string, torch::jit::Module> out;
  for (const auto& m : model.named_modules()) out.emplace(m.name, m.value);
  return out;
}

// Bytes of the module's parameters and buffers, each storage once (tied weights share one).
int64_t tensor_bytes_of(const torch::jit::Module& module) {
  std::set<const void*> seen;
  int64_t bytes = 0;
  auto add = [&](const at::Tensor& t) {
    if (t.defined() && seen.insert(t.storage().unsafeGetStorageImpl()).second) {
      bytes += static_cast<int64_t>(t.storage().nbytes());
    }
  };
  for (const auto& p : module.named_parameters(/*recurse=*/true)) add(p.value);
  for (const auto& b : module.named_buffers(/*recurse=*/true)) add(b.value);
  return bytes;
}

ParamSlot locate(const std::map<std::string, torch::jit::Module>& modules, const std::string& fqn) {
  const auto dot = fqn.rfind('.');
  const std::string path = dot == std::string::npos ? "" : fqn.substr(0, dot);
  const std::string attr = dot == std::string::npos ? fqn : fqn.substr(dot + 1);
  const ObjectPtr owner = modules.at(path)._ivalue();
  return {owner, owner->type()->getAttributeSlot(attr)};
}

}  // namespace

std::unique_ptr<Context> Context::create(const std::string& plan_path,
                                         const std::string& model_path, const LaunchEnv& env,
                                         ContextOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->plan = load_plan(plan_path);
  const schema::Plan& plan = impl->plan;
  if (env.world_size != plan.mesh.world_size) {
    fail(ExitCode::kUsage, plan_path + " is for " + std::to_string(plan.mesh.world_size) +
                               " rank(s) but WORLD_SIZE is " + std::to_string(env.world_size) +
                               "; re-plan with --world-size " + std::to_string(env.world_size) +
                               " or launch " + std::to_string(plan.mesh.world_size) + " ranks");
  }
  check_device_name(options.device);

  // Graph executors specialise and cache graphs at the first forward; the instrumented
  // graphs must run as written, and the same on every rank.
  torch::jit::setGraphExecutorOptimize(false);
  host_memory::install();
  impl->base_rss = host_memory::rss_bytes();
  impl->base_file_rss = host_memory::file_rss_bytes();
  impl->base_heap_objects = host_memory::heap_object_bytes();
  impl->model_path = model_path;
  impl->module = planner::load_module(model_path);
  impl->model_bytes = tensor_bytes_of(impl->module);
  const planner::ModelIR ir = planner::extract_model(impl->module, model_path);
  if (planner::structural_hash(ir) != plan.model.structural_hash) {
    fail(ExitCode::kUsage, model_path + " does not match " + plan_path +
                               " (its module tree, parameter names, shapes or dtypes differ); "
                               "run mfsdp validate --model to see how, then re-plan");
  }

  impl->rendezvous = std::make_unique<Rendezvous>(env, options.collective_timeout);
  impl->rank = env.rank;
  check_same_plan_everywhere(*impl->rendezvous, plan, model_path);

  // Streams, communicators and the plan's static slots (unsharded parameters live only in
  // them), in the same order on every rank.
  impl->runtime = make_runtime(plan, env, *impl->rendezvous,
                               {options.device, options.collective_timeout, plan_path});
  Runtime& runtime = *impl->runtime;
  impl->device = runtime.device();
  impl->ag_stream = &runtime.stream(StreamRole::kAllGather);
  impl->reduce_stream = &runtime.stream(StreamRole::kReduce);
  impl->ag_comm = runtime.communicator(CommRole::kAllGather);
  impl->replica_comm = runtime.communicator(CommRole::kReplicas);
  // Mesh: replicas are outer, shards inner: rank = replica * shard_size + shard_rank.
  impl->shard_rank = env.rank % static_cast<int>(plan.mesh.shard_size);
  impl->replica = env.rank / static_cast<int>(plan.mesh.shard_size);
  if (options.record_timeline) {
    impl->timeline = std::make_unique<Timeline>();
    runtime.set_timeline(impl->timeline.get());
  }
  std::map<std::string, int> slot_of;
  for (const auto& slot : plan.memory.slots) {
    for (const auto& unit : slot.units) slot_of[unit] = static_cast<int>(slot.index);
  }

  const auto modules = modules_by_path(impl->module);
  std::vector<std::string> unit_paths;
  impl->units.resize(plan.units.size());
  for (size_t u = 0; u < plan.units.size(); ++u) {
    const schema::Unit& planned = plan.units[u];
    UnitRuntime& unit = impl->units[u];
    unit.plan = &planned;
    auto it = slot_of.find(planned.name);
    unit.slot = it == slot_of.end() ? -1 : it->second;
    uint8_t* base = unit.slot == -1 ? nullptr : runtime.slot(unit.slot);
    int64_t offset = 0;
    unit.groups.reserve(planned.groups.size());
    for (const auto& group : planned.groups) {
      unit.groups.emplace_back(group, plan.policy, impl->shard_rank, base ? base + offset : nullptr,
                               impl->device);
      offset += unit.groups.back().unsharded_bytes();
      std::vector<at::Tensor> values;
      std::vector<std::vector<ParamSlot>> places;
      for (const auto& param : group.params) {
        std::vector<ParamSlot> registrations = {locate(modules, param.name)};
        for (const auto& alias : param.aliases) registrations.push_back(locate(modules, alias));
        values.push_back(registrations[0].owner->getSlot(registrations[0].slot).toTensor());
        places.push_back(std::move(registrations));
      }
      unit.groups.back().load(values);
      unit.places.push_back(std::move(places));
    }
    unit_paths.push_back(plan_unit_path(planned.name));
    // From here on the only copy of the unit's parameters is its master shards: the full
    // values go now, not after every unit, so loading never holds the model twice.
    for (const auto& group_places : unit.places) {
      for (const auto& registrations : group_places) {
        for (const ParamSlot& p : registrations) {
          const at::Tensor value = p.owner->getSlot(p.slot).toTensor();
          p.owner->setSlot(p.slot, at::empty({0}, value.options().device(impl->device)));
        }
      }
    }
  }
  // Buffers (and the parameters' empty placeholders) move to the device.
  if (!impl->device.is_cpu()) impl->module.to(impl->device);

  planner::instrument_units(impl->module, unit_paths);
  impl->cursor = std::make_unique<ScheduleCursor>(impl->plan);
  impl->rs_order = std::make_unique<ReduceScatterOrder>(impl->plan);
  impl->previous_hooks = planner::set_unit_hooks(impl.get());
  impl->setup_peak_rss = host_memory::peak_rss_bytes();
  return std::unique_ptr<Context>(new Context(std::move(impl)));
}

Context::Context(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Context::~Context() = default;

torch::jit::Module& Context::model() {
  return impl_->module;
}

void Context::check_usable() const {
  if (!impl_->failure) return;
  try {
    std::rethrow_exception(impl_->failure);
  } catch (const Error& e) {
    fail(e.code(), std::string("this context failed earlier and cannot continue: ") + e.what());
  } catch (const std::exception& e) {
    fail(ExitCode::kRuntime,
         std::string("this context failed earlier and cannot continue: ") + e.what());
  }
}

c10::IValue Context::forward(std::vector<c10::IValue> inputs) {
  check_usable();
  impl_->pending_error = nullptr;
  try {
    return impl_->module.forward(std::move(inputs));
  } catch (...) {
    if (impl_->pending_error) std::rethrow_exception(impl_->pending_error);
    throw;
  }
}
const std::string& Context::model_path() const {
  return impl_->model_path;
}
const schema::Plan& Context::plan() const {
  return impl_->plan;
}
int Context::rank() const {
  return impl_->rank;
}
int Context::world_size() const {
  return static_cast<int>(impl_->plan.mesh.world_size);
}
at::Device Context::device() const {
  return impl_->device;
}
const std::string& Context::device_description() const {
  return impl_->runtime->description();
}

void Context::microbatch(bool is_last) {
  if (impl_->in_step) {
    fail(ExitCode::kUsage,
         "microbatch() called in the middle of a microbatch; call it before the "
         "forward");
  }
  impl_->is_last_microbatch = is_last;
}

void Context::backward(const at::Tensor& loss) {
  check_usable();
  try {
    loss.backward();
    impl_->end_of_backward();
  } catch (...) {
    if (!impl_->failure) impl_->failure = std::current_exception();
    throw;
  }
}

c10::IValue Context::evaluate(std::vector<c10::IValue> inputs) {
  check_usable();
  if (impl_->in_step) {
    fail(ExitCode::kUsage,
         "evaluate() called in the middle of a training microbatch; call backward() first");
  }
  torch::NoGradGuard no_grad;
  impl_->evaluating = true;
  try {
    c10::IValue out = forward(std::move(inputs));
    impl_->end_of_evaluation();
    impl_->evaluating = false;
    return out;
  } catch (...) {
    impl_->evaluating = false;
    if (!impl_->failure) impl_->failure = std::current_exception();
    throw;
  }
}

std::vector<std::string> Context::exchange(const std::string& key, const std::string& value) {
  return impl_->rendezvous->exchange("user/" + key, value);
}

Timeline* Context::timeline() {
  return impl_->timeline.get();
}

std::vector<at::Tensor> Context::sharded_parameters() {
  sync_gradients();
  std::vector<at::Tensor> out;
  for (auto& unit : impl_->units) {
    for (auto& group : unit.groups) {
      if (group.trainable()) out.push_back(group.master());
    }
  }
  return out;
}

void Context::sync_gradients() {
  for (auto& unit : impl_->units) {
    for (auto& group : unit.groups) {
      if (!group.trainable()) continue;
      const bool same = group.master().scalar_type() == group.main_grad().scalar_type();
      group.master().mutable_grad() =
          same ? group.main_grad() : group.main_grad().to(group.master().scalar_type());
    }
  }
}

void Context::zero_grad() {
  for (auto& unit : impl_->units) {
    for (auto& group : unit.groups) {
      if (group.trainable()) group.main_grad().zero_();
    }
  }
}

double Context::clip_grad_norm(double max_norm) {
  double local = 0;
  for (auto& unit : impl_->units) {
    for (auto& group : unit.groups) {
      if (group.trainable()) local += group.main_grad().to(at::kDouble).pow(2).sum().item<double>();
    }
  }
  // Shards are disjoint within a shard group and identical across replicas.
  const double value =
      impl_->runtime->all_reduce_scalar(local, ReduceOp::kSum, "gradient-norm all-reduce");
  const double replicas = static_cast<double>(impl_->plan.mesh.replicate_size);
  const double norm = std::sqrt(value / replicas);
  if (norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (auto& unit : impl_->units) {
      for (auto& group : unit.groups) {
        if (group.trainable()) group.main_grad().mul_(scale);
      }
    }
  }
  return norm;
}

double Context::mean_over_ranks(double value) {
  return impl_->runtime->all_reduce_scalar(value, ReduceOp::kAvg, "mean over ranks");
}

std::map<std::string, at::Tensor> Context::full_parameters() {
  std::map<std::string, at::Tensor> out;
  for (auto& unit : impl_->units) {
    for (auto& group : unit.groups) {
      at::Tensor master = group.master().detach().contiguous();
      at::Tensor full = at::empty({group.layout().padded_numel}, master.options());
      const int64_t bytes = master.numel() * master.element_size();
      impl_->runtime->after_compute(*impl_->ag_stream);
      impl_->ag_comm->all_gather(master.data_ptr(), full.data_ptr(), bytes,
                                 "full-parameter all-gather of " + unit.plan->name);
      impl_->ag_stream->synchronize();
      const std::vector<at::Tensor> values = group.unflatten(full);
      for (size_t p = 0; p < values.size(); ++p) {
        const auto& layout = group.layout().params[p];
        const at::Tensor value = values[p].to(at::kCPU);
        out[layout.name] = value;
        for (const auto& alias : layout.aliases) out[alias] = value;
      }
    }
  }
  return out;
}

ContextStats Context::stats() const {
  ContextStats s;
  for (const auto& unit : impl_->units) {
    for (const auto& group : unit.groups) {
      // What is really allocated, not what the layout says.
      const at::Tensor& master = group.master();
      s.sharded_param_bytes += master.numel() * master.element_size();
      if (group.trainable()) {
        const at::Tensor& grad = group.main_grad();
        s.sharded_grad_bytes += grad.numel() * grad.element_size();
      }
    }
  }
  s.slot_bytes = impl_->runtime->slot_bytes();
  s.peak_unsharded_bytes = impl_->peak_bytes;
  s.divergences = impl_->divergences;
  s.exposed_comm_us = impl_->runtime->exposed_us();
  s.runtime_base_rss_bytes = impl_->base_rss;
  s.runtime_base_file_rss_bytes = impl_->base_file_rss;
  s.model_bytes = impl_->model_bytes;
  s.setup_peak_rss_bytes = impl_->setup_peak_rss;
  s.activation_peak_bytes = impl_->activation_peak;
  s.activation_peak_cached_bytes = impl_->activation_peak_cached;
  s.runtime_base_heap_object_bytes = impl_->base_heap_objects;
  return s;
}

}  // namespace mfsdp::executor
