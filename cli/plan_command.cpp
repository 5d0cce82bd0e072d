// `mfsdp plan model.pt ...`: one sharding scope built from flags or a scope file, finalized
// into a plan file, plus a short summary for the person who ran it.
//
// Over 400 lines: the flags, the scope they build, and the summary, each short; the search
// itself is search/ and its printing cli/search_report.*.
#include "cli/plan_command.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/byte_size.h"
#include "cli/plan_flags.h"
#include "cli/plan_summary.h"
#include "cli/predict_flags.h"
#include "cli/rank_launch.h"
#include "cli/search_report.h"
#include "cli/whole_number.h"
#include "planner/scope_file.h"
#include "planner/sharding_scope.h"
#include "planner/torchscript/reference_compute.h"
#include "planner/trace_input.h"
#include "schema/error.h"
#include "schema/json_text.h"
#include "schema/model_path.h"
#include "schema/plan.h"
#include "schema/plan_check.h"
#include "schema/plan_json.h"

namespace mfsdp::cli {
namespace {

// OMP_NUM_THREADS as a whole number from 1 to 65536, else 0.
int omp_threads() {
  const char* value = std::getenv("OMP_NUM_THREADS");
  if (value == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  return end != value && *end == '\0' && n >= 1 && n <= 65536 ? static_cast<int>(n) : 0;
}

// The cores this process may run on.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

std::string default_output(const std::string& model) {
  std::string base = model.substr(model.find_last_of('/') + 1);
  const auto dot = base.rfind('.');
  if (dot != std::string::npos && dot > 0) base = base.substr(0, dot);
  return base + ".plan.json";
}

std::vector<planner::UnitSelector> selectors_in_flag_order(const CLI::App& cmd,
                                                           const PlanFlags& flags) {
  const CLI::Option* unit = cmd.get_option("--unit");
  const CLI::Option* type = cmd.get_option("--unit-type");
  std::vector<planner::UnitSelector> out;
  size_t next_unit = 0, next_type = 0;
  for (const CLI::Option* opt : cmd.parse_order()) {
    if (opt == unit) {
      out.push_back({planner::UnitSelector::Kind::kPath, flags.unit_globs.at(next_unit++)});
    } else if (opt == type) {
      out.push_back({planner::UnitSelector::Kind::kType, flags.unit_types.at(next_type++)});
    }
  }
  return out;
}

// --checkpoint and --checkpoint-type, for planner::checkpointed_units.
std::vector<planner::UnitSelector> checkpoint_selectors(const PlanFlags& flags) {
  std::vector<planner::UnitSelector> out;
  for (const std::string& glob : flags.checkpoint_globs) {
    out.emplace_back(planner::UnitSelector::Kind::kPath, glob);
    out.back().flag = "--checkpoint";
  }
  for (const std::string& type : flags.checkpoint_types) {
    out.emplace_back(planner::UnitSelector::Kind::kType, type);
    out.back().flag = "--checkpoint-type";
  }
  return out;
}

// --keep-after-forward, for planner::unit_reshard_after_forward.
std::vector<planner::UnitSelector> keep_selectors(const PlanFlags& flags) {
  std::vector<planner::UnitSelector> out;
  for (const std::string& glob : flags.keep_globs) {
    out.emplace_back(planner::UnitSelector::Kind::kPath, glob);
    out.back().flag = "--keep-after-forward";
  }
  return out;
}

const std::string kPrefetchRange = "0 (no prefetch) or more, up to 9223372036854775807";

// The flag that sets each mesh and policy field of the plan.
const std::map<std::string, std::string>& flag_of_field() {
  static const std::map<std::string, std::string> flags = {
      {"mesh.world_size", "--world-size"},
      {"mesh.replicate_size", "--replicate"},
      {"policy.param_dtype", "--param-dtype"},
      {"policy.reduce_dtype", "--reduce-dtype"},
      {"policy.forward_prefetch", "--forward-prefetch"},
      {"policy.backward_prefetch", "--backward-prefetch"},
      {"policy.resident_budget_bytes", "--resident-budget"},
      {"policy.align_bytes", "--align"}};
  return flags;
}

// Mesh and policy values come from flags or the scope file; refuse bad ones before loading the
// model, by the rules ShardingScope and validate apply (schema::check_mesh, check_policy), naming
// where the value came from: "--align (policy.align_bytes) 24 is not ..." for a flag,
// "scope.json: policy.align_bytes 24 is not ..." for the scope file.
void check_mesh_and_policy(const CLI::App& cmd, const std::string& scope_file,
                           const schema::Mesh& mesh, const schema::Policy& policy) {
  std::vector<schema::Problem> problems = schema::check_mesh(mesh);
  for (auto& p : schema::check_policy(policy)) problems.push_back(std::move(p));
  if (problems.empty()) return;
  const schema::Problem& first = problems.front();
  const auto flag = flag_of_field().find(first.path);
  const bool by_flag =
      flag != flag_of_field().end() &&
      (cmd.count(flag->second) > 0 ||
       (first.path.find("_prefetch") != std::string::npos && cmd.count("--prefetch")));
  const std::string name =
      by_flag || scope_file.empty()
          ? (flag != flag_of_field().end() ? flag->second + " (" : "(") + first.path + ")"
          : scope_file + ": " + first.path;
  const std::string keep = first.path == "policy.param_dtype" ? " (or keep)" : "";
  fail(ExitCode::kUsage, name + " " + first.message + keep);
}

schema::Training read_training_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ExitCode::kUsage, path + ": cannot open the --training file (does it exist?)");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc;
  const std::string error = schema::parse_json_text(text.str(), doc);
  if (!error.empty()) fail(ExitCode::kUsage, path + ": not valid JSON: " + error);
  return schema::training_from_json(doc, path, "");
}

void write_plan(const PlanFlags& flags, const std::optional<schema::Training>& training,
                schema::Plan plan);

int trace_thread_count(int64_t given, const schema::Mesh& mesh) {
  if (given > 0) return static_cast<int>(given);
  if (omp_threads() > 0) return omp_threads();
  return std::max<int>(
      1, usable_cores() / static_cast<int>(std::min<int64_t>(mesh.world_size, 65536)));
}

// The plan's `prediction` section, each time rounded to 0.001 ms.
schema::StepPrediction predicted_step(const schema::Plan& plan,
                                      const predict::PredictRequest& request) {
  const predict::PlanPrediction p = predict::predict_plan(plan, request);
  const auto ms = [](double us) { return std::round(us) / 1000; };
  schema::StepPrediction s;
  s.profile = p.profile.name;
  s.microbatches = p.microbatches;
  s.microbatch_samples = p.model.microbatch_samples;
  s.optimizer = p.optimizer;
  s.compute_scale = std::round(p.model.compute_scale * 1e4) / 1e4;
  s.compute_ms = ms(p.prediction.compute_us);
  s.exposed_comm_ms = ms(p.prediction.exposed_comm_us);
  s.contention_ms = ms(p.prediction.contention_us);
  s.step_ms = s.compute_ms + s.exposed_comm_ms + s.contention_ms;
  s.memory_bytes = predict::rank_memory_bytes(plan, p.optimizer, p.model.microbatch_samples);
  return s;
}

// "8,16,32" -> {"8", "16", "32"}; "" -> {}.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin <= text.size() && !text.empty()) {
    const size_t comma = text.find(',', begin);
    items.push_back(
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return items;
}

// A plan from the command line is run as the whole model: every parameter needs a unit.
void check_whole_model(const schema::Plan& plan) {
  for (const auto& d : plan.diagnostics) {
    if (d.code == "ownership.unmanaged") {
      fail(ExitCode::kPlanning, "mfsdp plan covers the whole model, but " +
                                    d.message.substr(0, d.message.find(", so ")) +
                                    "; add a unit that contains them, e.g. --unit '<root>'");
    }
  }
}

// --trace-device, checked against the flags that need times.
planner::TraceDevice trace_device_of(const CLI::App& cmd, const PlanFlags& flags) {
  if (flags.fused_attention && flags.trace_device != "meta") {
    fail(ExitCode::kUsage, planner::kFusedAttentionNeedsMeta);
  }
  if (flags.trace_device.empty()) return planner::TraceDevice::kCpu;
  if (flags.trace_inputs.empty()) {
    fail(ExitCode::kUsage,
         "--trace-device says where the traced step runs; give --trace-input too");
  }
  if (flags.trace_device == "cpu") return planner::TraceDevice::kCpu;
  if (flags.trace_device != "meta") {
    fail(ExitCode::kUsage, "--trace-device '" + flags.trace_device + "': expected cpu or meta");
  }
  for (const char* flag : {"--trace-repeats", "--trace-threads"}) {
    if (cmd.count(flag) > 0) {
      fail(ExitCode::kUsage, std::string(flag) +
                                 " is for timing the traced step, and a meta trace "
                                 "(--trace-device meta) times nothing; drop one of them");
    }
  }
  if (!flags.prediction.profile.empty()) {
    const predict::Profile profile = predict::load_profile(flags.prediction.profile);
    if (!profile.compute.rates) {
      fail(ExitCode::kUsage,
           "--profile " + flags.prediction.profile +
               " has no compute rates (compute.rates) to time a meta trace's work, which has no "
               "times: use a built-in GPU profile (" +
               predict::builtin_profile_list() +
               "), add rates to it (docs/predict.md#analytic-compute), trace on the CPU, or drop "
               "--profile to plan with the meta trace's memory");
    }
  }
  return planner::TraceDevice::kMeta;
}

// --optimize and --sweep: the plans tried, the table and the choice printed; returns the plan
// to write (the chosen one, or with --sweep alone the user's).
schema::Plan search_plans_and_choose(const PlanFlags& flags, const CLI::App& cmd,
                                     planner::ShardedModel& model, const schema::Mesh& mesh,
                                     const schema::Policy& policy,
                                     const std::optional<schema::Training>& training,
                                     search::UnitChoice yours,
                                     const std::vector<planner::TraceInput>& trace_inputs,
                                     int trace_repeats, planner::TraceDevice trace_device) {
  SearchInput in;
  if (cmd.count("--memory-budget")) {
    in.memory_budget = parse_bytes(flags.memory_budget, "--memory-budget");
  }
  const bool meta = trace_device == planner::TraceDevice::kMeta;
  if (trace_inputs.empty() && flags.optimize && !in.memory_budget) {
    fail(ExitCode::kUsage,
         "--optimize without --trace-input chooses by memory alone and needs --memory-budget "
         "SIZE; or give --trace-input SHAPE and --profile P to predict each plan's step");
  }
  if (meta && flags.optimize && !in.memory_budget && flags.prediction.profile.empty()) {
    fail(ExitCode::kUsage,
         "--optimize with a meta trace (--trace-device meta) and no --profile chooses by "
         "memory, activations included, and collectives, and needs --memory-budget SIZE; or "
         "give --profile NAME to predict each plan at its compute rates");
  }
  if (!trace_inputs.empty() && !meta && flags.prediction.profile.empty()) {
    fail(ExitCode::kUsage, std::string(flags.optimize ? "--optimize" : "--sweep") +
                               " needs --profile FILE|NAME to predict the traced plans: a file "
                               "from mfsdp probe, or a built-in (" +
                               predict::builtin_profile_list() + ")");
  }
  in.model = &model;
  in.model_path = flags.model;
  in.mesh = mesh;
  in.policy = policy;
  in.yours = std::move(yours);
  in.trace_inputs = trace_inputs;
  in.trace_repeats = trace_repeats;
  in.trace_device = trace_device;
  in.attention = flags.fused_attention ? planner::Attention::kFused : planner::Attention::kAsTraced;
  in.training = training;
  in.check_yours = check_whole_model;
  if (!flags.prediction.profile.empty()) {
    in.profile = predict::load_profile(flags.prediction.profile);
    in.predict = predict_request(flags.prediction);
  }
  for (const std::string& item : split_list(flags.sweep_worlds)) {
    in.sweep_worlds.push_back(
        whole_number(item, "--sweep-world", 1, schema::kMaxWorldSize, schema::world_size_range()));
  }
  SearchMode mode;
  mode.optimize = flags.optimize;
  mode.sweep = flags.sweep;
  mode.print_choice = !flags.quiet && !flags.json_summary;
  return choose_plan(in, mode, std::cout, std::cerr);
}

void run_plan(const CLI::App& cmd, const PlanFlags& flags) {
  planner::ScopeFile scope_file;
  const bool has_scope_file = !flags.scope_file.empty();
  const bool has_selectors = !flags.unit_globs.empty() || !flags.unit_types.empty();
  if (has_scope_file) scope_file = planner::read_scope_file(flags.scope_file);
  if (has_scope_file + has_selectors + flags.auto_units != 1) {
    fail(ExitCode::kUsage, "choose the units one way: --unit/--unit-type, --auto, or --scope");
  }

  schema::Mesh mesh;
  if (cmd.count("--world-size")) {
    mesh.world_size = whole_number(flags.world_size, "--world-size", 1, schema::kMaxWorldSize,
                                   schema::world_size_range());
  } else if (scope_file.world_size) {
    mesh.world_size = *scope_file.world_size;
  } else {
    fail(ExitCode::kUsage,
         "--world-size is required (the number of ranks the plan is for; or "
         "mesh.world_size in a --scope file)");
  }
  mesh.replicate_size = cmd.count("--replicate")
                            ? whole_number(flags.replicate, "--replicate", 1, schema::kMaxWorldSize,
                                           schema::world_size_range())
                            : scope_file.replicate_size.value_or(1);
  // Left 0 (and refused below) when the replicate size does not divide the world size.
  if (mesh.replicate_size >= 1 && mesh.world_size % mesh.replicate_size == 0) {
    mesh.shard_size = mesh.world_size / mesh.replicate_size;
  }

  schema::Policy policy = scope_file.policy;
  if (cmd.count("--param-dtype")) {
    policy.param_dtype =
        flags.param_dtype == "keep" ? std::nullopt : std::optional(flags.param_dtype);
  }
  if (cmd.count("--reduce-dtype")) policy.reduce_dtype = flags.reduce_dtype;
  const auto one_of = [](bool yes, bool no, const std::string& name) {
    if (yes && no) {
      fail(ExitCode::kUsage,
           "--" + name + " and --no-" + name + " contradict each other; give one of them");
    }
  };
  one_of(flags.reshard_after_forward, flags.no_reshard_after_forward, "reshard-after-forward");
  one_of(flags.unified_stream, flags.no_unified_stream, "unified-stream");
  if (flags.reshard_after_forward) policy.reshard_after_forward = true;
  if (flags.no_reshard_after_forward) policy.reshard_after_forward = false;
  const auto prefetch = [](const std::string& text, const char* flag) {
    return whole_number(text, flag, 0, INT64_MAX, kPrefetchRange);
  };
  if (cmd.count("--prefetch")) {
    policy.forward_prefetch = policy.backward_prefetch = prefetch(flags.prefetch, "--prefetch");
  }
  if (cmd.count("--forward-prefetch")) {
    policy.forward_prefetch = prefetch(flags.forward_prefetch, "--forward-prefetch");
  }
  if (cmd.count("--backward-prefetch")) {
    policy.backward_prefetch = prefetch(flags.backward_prefetch, "--backward-prefetch");
  }
  if (cmd.count("--resident-budget")) {
    policy.resident_budget_bytes = parse_bytes(flags.resident_budget, "--resident-budget");
  }
  if (flags.unified_stream) policy.unified_stream = true;
  if (flags.no_unified_stream) policy.unified_stream = false;
  if (cmd.count("--align")) {
    policy.align_bytes = whole_number(flags.align_bytes, "--align (policy.align_bytes)", INT64_MIN,
                                      INT64_MAX, schema::align_range());
  }

  check_mesh_and_policy(cmd, flags.scope_file, mesh, policy);
  for (const char* flag : {"--sweep-world", "--memory-budget"}) {
    if (cmd.count(flag) > 0 && !flags.optimize && !flags.sweep) {
      fail(ExitCode::kUsage, std::string(flag) + " is for --optimize or --sweep; add one");
    }
  }
  for (const std::string& flag : predict_detail_flags()) {
    if (cmd.count(flag) > 0 && flags.prediction.profile.empty()) {
      fail(ExitCode::kUsage, flag + " is for predicting the step; add --profile");
    }
  }
  if (!flags.prediction.profile.empty() && flags.trace_inputs.empty()) {
    fail(ExitCode::kUsage,
         "--profile predicts the step from the unit times a trace measures; "
         "give --trace-input SHAPE (the run's per-rank microbatch)");
  }
  int64_t trace_repeats = planner::kAutoTimedSteps;
  if (!flags.trace_repeats.empty()) {
    if (flags.trace_inputs.empty()) {
      fail(ExitCode::kUsage, "--trace-repeats times the traced step; give --trace-input too");
    }
    trace_repeats = whole_number(flags.trace_repeats, "--trace-repeats", 1, 100, "from 1 to 100");
  }
  int64_t trace_threads = 0;
  if (!flags.trace_threads.empty()) {
    if (flags.trace_inputs.empty()) {
      fail(ExitCode::kUsage, "--trace-threads sizes the traced step; give --trace-input too");
    }
    trace_threads =
        whole_number(flags.trace_threads, "--trace-threads", 1, 65536, "from 1 to 65536");
  }
  const planner::TraceDevice trace_device = trace_device_of(cmd, flags);
  std::vector<planner::TraceInput> trace_inputs;
  for (const std::string& spec : flags.trace_inputs) {
    trace_inputs.push_back(planner::parse_trace_input(spec));
  }
  // Before the model is loaded (and traced): a missing output directory is found at once.
  check_output_directory("-o", flags.output);
  planner::ShardedModel model = planner::ShardedModel::load(flags.model);
  std::vector<planner::UnitSelector> selectors;
  if (!flags.auto_units) {
    selectors = has_scope_file ? scope_file.units : selectors_in_flag_order(cmd, flags);
  }
  const std::vector<std::vector<int>> modules =
      flags.auto_units ? planner::one_module_units(planner::auto_units(model.ir()))
                       : planner::select_units(model.ir(), selectors);
  const std::vector<bool> checkpoint =
      planner::checkpointed_units(model.ir(), modules, selectors, checkpoint_selectors(flags));
  const std::vector<std::optional<bool>> reshard =
      planner::unit_reshard_after_forward(model.ir(), modules, selectors, keep_selectors(flags));
  const std::optional<schema::Training> training =
      flags.training_file.empty() ? scope_file.training : read_training_file(flags.training_file);
  const bool searching = flags.optimize || flags.sweep;
  if (searching) {
    // The threads a rank of this plan gets from mfsdp run on one node, unless told.
    planner::set_compute_threads(trace_thread_count(trace_threads, mesh));
    search::UnitChoice yours{flags.auto_units ? "blocks + model" : "yours", modules, checkpoint,
                             reshard};
    write_plan(
        flags, training,
        search_plans_and_choose(flags, cmd, model, mesh, policy, training, yours, trace_inputs,
                                static_cast<int>(trace_repeats), trace_device));
    return;
  }
  planner::ShardingScope scope(model, mesh, policy);
  for (size_t u = 0; u < modules.size(); ++u) {
    planner::UnitOptions options;
    options.checkpoint = checkpoint[u];
    options.reshard_after_forward = reshard[u];
    scope.fully_shard(planner::module_paths(model.ir(), modules[u]), options);
  }
  if (!trace_inputs.empty()) {
    std::vector<std::vector<std::string>> unit_paths;
    for (const std::vector<int>& unit : modules) {
      unit_paths.push_back(planner::module_paths(model.ir(), unit));
    }
    // The threads a rank of this plan gets from mfsdp run on one node, unless told.
    planner::set_compute_threads(trace_thread_count(trace_threads, mesh));
    scope.use_trace(planner::trace_unit_modules(
        flags.model, unit_paths, trace_inputs, policy.param_dtype, checkpoint,
        static_cast<int>(trace_repeats), trace_device,
        flags.fused_attention ? planner::Attention::kFused : planner::Attention::kAsTraced));
  }
  write_plan(flags, training, scope.finalize());
}

// Writes `plan` with its training defaults (and, with --profile, its predicted step) and
// prints the summary.
void write_plan(const PlanFlags& flags, const std::optional<schema::Training>& training,
                schema::Plan plan) {
  plan.training = training;
  check_whole_model(plan);
  if (!flags.prediction.profile.empty()) {
    plan.prediction = predicted_step(plan, predict_request(flags.prediction));
  }

  const std::string output = flags.output.empty() ? default_output(flags.model) : flags.output;
  // Relative to the plan file, so that `mfsdp run` finds the model from any directory.
  plan.model.path = schema::model_path_for_plan(flags.model, output);
  schema::write_file_atomically(output, schema::dump_plan(plan));
  if (flags.json_summary) print_json_summary(plan, output);
  if (!flags.quiet && !flags.json_summary) print_summary(plan, flags.model, output);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Compile a TorchScript model and a sharding scope into a plan file");
  add_plan_flags(*cmd, *flags);
  cmd->callback([cmd, flags] { run_plan(*cmd, *flags); });
}

}  // namespace mfsdp::cli
