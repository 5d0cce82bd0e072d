// Context::create, one named step per function, in the order they run (docs/executor.md,
// "What create does").
#include <map>

#include "executor/runtime/context_impl.h"
#include "planner/torchscript/host_memory.h"
#include "planner/torchscript/instrumentation.h"
#include "planner/torchscript/mapped_archive.h"
#include "planner/torchscript/model_check.h"
#include "planner/torchscript/torch_model.h"
#include "schema/digest.h"
#include "schema/plan_json.h"
#include "schema/plan_loader.h"

namespace mfsdp::executor {
namespace {

using Impl = Context::Impl;

// 1. The plan, valid and for this world size; the device option, spelled right.
void load_and_check_plan(Impl& impl, const std::string& plan_path, const LaunchEnv& env) {
  impl.plan = schema::load_plan_file(plan_path, schema::PlanCheck::kRules);
  const schema::Plan& plan = impl.plan;
  if (env.world_size != plan.mesh.world_size) {
    fail(ExitCode::kUsage, plan_path + " is for " + std::to_string(plan.mesh.world_size) +
                               " rank(s) but WORLD_SIZE is " + std::to_string(env.world_size) +
                               "; re-plan with --world-size " + std::to_string(env.world_size) +
                               " or launch " + std::to_string(plan.mesh.world_size) + " ranks");
  }
  // Without loss scaling, small float16 gradients underflow to zero and large ones overflow:
  // training would degrade without a word. bfloat16 has float32's range at the same size.
  if (plan.policy.param_dtype && *plan.policy.param_dtype == "float16") {
    fail(ExitCode::kUsage, plan_path +
                               ": param dtype float16 needs loss scaling, which mfsdp does not do "
                               "yet; plan with --param-dtype bfloat16 (the same memory, float32's "
                               "range) or float32");
  }
  check_device_name(impl.options.device);
}

// Where the initial values come from (docs/large-models.md): --init-from's file, --init's rule,
// a checkpoint to resume, or the model file itself unless it is a skeleton.
void choose_weights(Impl& impl, const std::string& model_path) {
  const ContextOptions& options = impl.options;
  if (!options.init_from.empty() && !options.init.empty()) {
    fail(ExitCode::kUsage, "--init-from and --init both give the initial weights; pass one");
  }
  if (!options.name_map.empty() && options.init_from.empty()) {
    fail(ExitCode::kUsage, "--name-map renames the tensors of --init-from WEIGHTS; pass both");
  }
  if (options.weights_from_checkpoint) {
    // The checkpoint's values replace whatever is loaded, so a skeleton needs nothing else;
    // --init-from and --init are for a start without one.
    impl.weights_description = "the checkpoint";
    return;
  }
  if (!options.init_from.empty()) {
    impl.init = std::make_unique<InitialWeights>(options.init_from, impl.plan, impl.module,
                                                 options.name_map);
    impl.weights_description = impl.init->description();
  } else if (!options.init.empty()) {
    impl.initializer = std::make_unique<Initializer>(options.init, options.init_seed, impl.plan);
    impl.weights_description = impl.initializer->description();
  } else if (impl.skeleton) {
    fail(ExitCode::kUsage, model_path +
                               " is a skeleton: its tensors were saved from the meta device and "
                               "hold no values; give the initial weights with --init-from "
                               "WEIGHTS (safetensors), --init normal:0.02 (a rule), or --resume "
                               "from a checkpoint, or train the full model file "
                               "(docs/large-models.md)");
  }
}

// 2. The model, with the memory counters' baseline taken before it loads; it must be the
// model the plan was made for.
void load_and_check_model(Impl& impl, const std::string& plan_path, const std::string& model_path) {
  // Graph executors specialise and cache graphs at the first forward; the instrumented
  // graphs must run as written, and the same on every rank.
  torch::jit::setGraphExecutorOptimize(false);
  host_memory::install();
  impl.base_rss = host_memory::rss_bytes();
  impl.base_file_rss = host_memory::file_rss_bytes();
  impl.base_heap_objects = host_memory::heap_object_bytes();
  impl.model_path = model_path;
  planner::MappedArchiveStats loaded;
  impl.module = planner::load_module(model_path, &loaded);
  // Everything but the parameters is read now; parameters only where shard_parameters reads
  // this rank's slices, which it adds.
  impl.model_bytes = loaded.tensor_bytes - loaded.parameter_bytes;
  const planner::ModelIR ir = planner::extract_model(impl.module, model_path);
  planner::require_plan_fits_model(
      impl.plan, ir, model_path, plan_path,
      {"pass the model the plan was made for, or re-plan (mfsdp validate --model lists every "
       "difference)",
       "the plan was edited after mfsdp plan wrote it (its structural hash still matches the "
       "model); re-plan"});
  impl.model_digest = loaded.directory_digest;
  impl.skeleton = loaded.missing_bytes > 0;
  choose_weights(impl, model_path);
}

// 3. The other ranks, and the check that every rank runs the same plan on the same model
// file (weights included), before the first collective.
void meet_ranks(Impl& impl, const LaunchEnv& env) {
  impl.rendezvous = std::make_unique<Rendezvous>(env, impl.options.collective_timeout);
  impl.rank = env.rank;
  // The model file's zip directory names every record with its size and CRC-32: comparing
  // its digest (taken as the model loaded) costs nothing more, where hashing the file would
  // read all of it on every rank.
  const std::string mine = schema::sha256_hex(schema::dump_plan(impl.plan)) + impl.model_digest +
                           (impl.init ? impl.init->layout_digest() : "");
  const std::vector<std::string> all = impl.rendezvous->exchange("mfsdp/plan-check", mine);
  std::string differing;
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] != all[0]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!differing.empty()) {
    fail(ExitCode::kUsage, "rank(s) " + differing +
                               (impl.init ? " were given a different plan, model or --init-from "
                                            "weights than rank 0; give every rank the same files"
                                          : " were given a different plan or model than rank 0; "
                                            "give every rank the same plan and model files"));
  }
}

// 4. The device the ranks agree on, its streams, communicators and the plan's static slots
// (unsharded parameters live only in them), in the same order on every rank.
void create_runtime(Impl& impl, const std::string& plan_path, const LaunchEnv& env,
                    const RuntimeFactory& make) {
  impl.runtime =
      make(impl.plan, env, *impl.rendezvous,
           RuntimeOptions{impl.options.device, impl.options.collective_timeout, plan_path});
  Runtime& runtime = *impl.runtime;
  impl.device = runtime.device();
  impl.ag_stream = &runtime.stream(StreamRole::kAllGather);
  impl.reduce_stream = &runtime.stream(StreamRole::kReduce);
  impl.ag_comm = runtime.communicator(CommRole::kAllGather);
  impl.replica_comm = runtime.communicator(CommRole::kReplicas);
  impl.shard_rank = env.rank % static_cast<int>(impl.plan.mesh.shard_size);
  if (impl.options.record_timeline) {
    impl.timeline = std::make_unique<Timeline>();
    runtime.set_timeline(impl.timeline.get());
  }
}

// 5. Every unit's groups: master shards filled from the mapped model file, main gradients, the
// unsharded buffers in the unit's slot. Each rank reads only its slices; a unit's full values
// are dropped once its shards are filled, which gives their pages back.
void shard_parameters(Impl& impl) {
  const schema::Plan& plan = impl.plan;
  std::map<std::string, int> slot_of;
  for (const auto& slot : plan.memory.slots) {
    for (const auto& unit : slot.units) slot_of[unit] = static_cast<int>(slot.index);
  }
  const ModelAttributes attributes(impl.module);
  impl.units.resize(plan.units.size());
  for (size_t u = 0; u < plan.units.size(); ++u) {
    const schema::Unit& planned = plan.units[u];
    UnitRuntime& unit = impl.units[u];
    unit.plan = &planned;
    auto it = slot_of.find(planned.name);
    unit.slot = it == slot_of.end() ? -1 : it->second;
    uint8_t* base = unit.slot == -1 ? nullptr : impl.runtime->slot(unit.slot);
    int64_t offset = 0;
    unit.groups.reserve(planned.groups.size());
    for (const auto& group : planned.groups) {
      unit.groups.emplace_back(group, plan.policy, impl.shard_rank, base ? base + offset : nullptr,
                               impl.device);
      offset += unit.groups.back().unsharded_bytes();
      unit.bindings.push_back(attributes.locate(group));
      FlatGroup& flat = unit.groups.back();
      if (impl.init) {
        impl.model_bytes += flat.load(impl.init->values(group));
        impl.init->release(group);
      } else if (impl.initializer) {
        const Initializer& rule = *impl.initializer;
        flat.load([&](size_t p, int64_t first, int64_t count) {
          return rule.slice(group.params[p], first, count);
        });
      } else if (!(impl.skeleton && impl.options.weights_from_checkpoint)) {
        impl.model_bytes += flat.load(current_values(unit.bindings.back()));
      }
    }
    for (const GroupBinding& binding : unit.bindings) drop_full_values(binding, impl.device);
  }
  if (impl.init) {
    impl.init->load_buffers(impl.module);
    impl.init.reset();  // its files are unmapped
  } else if (impl.initializer) {
    impl.initializer->load_buffers(impl.module);
    impl.initializer.reset();
  } else if (impl.skeleton) {
    // The checkpoint writes the buffers' values; they need memory to be written into.
    for (const auto& b : impl.module.named_buffers(/*recurse=*/true)) {
      planner::allocate_missing_data(b.value);
    }
  }
  // Buffers (and the parameters' empty placeholders) move to the device.
  if (!impl.device.is_cpu()) impl.module.to(impl.device);
}

// 6. The units' hooks in the model's graphs, the schedule to follow, and this context as the
// hooks' receiver.
void instrument(Impl& impl) {
  std::vector<std::vector<std::string>> unit_modules;
  std::vector<bool> checkpointed;
  for (const schema::Unit& unit : impl.plan.units) {
    unit_modules.push_back(schema::unit_modules(unit));
    checkpointed.push_back(unit.checkpoint);
  }
  planner::instrument_unit_modules(impl.module, unit_modules, checkpointed);
  impl.cursor = std::make_unique<ScheduleCursor>(impl.plan);
  impl.rs_order = std::make_unique<ReduceScatterOrder>(impl.plan);
  impl.previous_hooks = planner::set_unit_hooks(&impl);
}

}  // namespace

std::unique_ptr<Context> create_context(const std::string& plan_path, const std::string& model_path,
                                        const LaunchEnv& env, ContextOptions options,
                                        const RuntimeFactory& make) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  load_and_check_plan(*impl, plan_path, env);
  load_and_check_model(*impl, plan_path, model_path);
  meet_ranks(*impl, env);
  create_runtime(*impl, plan_path, env, make);
  shard_parameters(*impl);
  instrument(*impl);
  impl->setup_peak_rss = host_memory::peak_rss_bytes();
  return Impl::wrap(std::move(impl));
}

std::unique_ptr<Context> Context::create(const std::string& plan_path,
                                         const std::string& model_path, const LaunchEnv& env,
                                         ContextOptions options) {
  return create_context(plan_path, model_path, env, std::move(options), make_runtime);
}

}  // namespace mfsdp::executor
