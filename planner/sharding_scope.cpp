#include "planner/sharding_scope.h"

#include <algorithm>

#include "planner/passes.h"
#include "schema/error.h"
#include "schema/plan_check.h"

namespace mfsdp::planner {
namespace {

thread_local ShardingScope* active_scope = nullptr;

std::string scope_label(int id) {
  return "scope #" + std::to_string(id);
}

// The first broken rule of the mesh and policy (schema::check_mesh, check_policy), if any.
void check_settings(const schema::Mesh& mesh, const schema::Policy& policy) {
  std::vector<schema::Problem> problems = schema::check_mesh(mesh);
  for (auto& p : schema::check_policy(policy)) problems.push_back(std::move(p));
  if (!problems.empty()) {
    fail(ExitCode::kPlanning, problems.front().path + " " + problems.front().message);
  }
}

}  // namespace

ShardingScope::ShardingScope(ShardedModel& model, schema::Mesh mesh, schema::Policy policy)
    : model_(model), mesh_(mesh), policy_(std::move(policy)) {
  if (active_scope) {
    fail(ExitCode::kPlanning,
         "a sharding scope is already active: mfsdp does not support nesting scopes; finalize "
         "the open scope first");
  }
  check_settings(mesh_, policy_);
  id_ = ++model_.scopes_opened_;
  active_scope = this;
}

ShardingScope::~ShardingScope() {
  if (!finalized_) {
    for (const std::vector<int>& unit : units_) {
      for (int m : unit) model_.unit_scope_[m] = -1;
    }
  }
  close();
}

ShardingScope* ShardingScope::active() {
  return active_scope;
}

void ShardingScope::close() {
  if (active_scope == this) active_scope = nullptr;
}

void ShardingScope::fully_shard(const std::string& path, UnitOptions options) {
  fully_shard(std::vector<std::string>{path}, options);
}

void ShardingScope::fully_shard(const std::vector<std::string>& paths, UnitOptions options) {
  std::vector<std::string> names;
  for (const std::string& path : paths) {
    names.push_back(display_name(path == schema::kRootName ? "" : path));
  }
  const std::string name = schema::unit_name_of(names);
  if (finalized_) {
    fail(ExitCode::kPlanning, "fully_shard('" + name +
                                  "') after the scope was finalized; "
                                  "register every unit before finalize()");
  }
  if (paths.empty()) {
    fail(ExitCode::kPlanning, "fully_shard() of no module; name the modules of the unit");
  }
  const ModelIR& ir = model_.ir_;
  std::vector<int> modules;
  for (size_t i = 0; i < paths.size(); ++i) {
    const int module = ir.find_module(paths[i]);
    if (module == -1) {
      fail(ExitCode::kPlanning, "fully_shard('" + name + "'): the model has no module '" +
                                    names[i] +
                                    "'; use a fully-qualified module path such as 'layers.0'");
    }
    if (paths.size() > 1 && module == 0) {
      fail(ExitCode::kPlanning, "fully_shard('" + name +
                                    "'): the model cannot be merged with other modules; shard "
                                    "<root> as a unit of its own");
    }
    for (int other : modules) {
      if (other == module || ir.contains(other, module) || ir.contains(module, other)) {
        fail(ExitCode::kPlanning, "fully_shard('" + name + "'): '" +
                                      display_name(ir.modules[other].path) + "' and '" + names[i] +
                                      "' are the same module or one holds the other; merge "
                                      "modules that lie apart, such as 'layers.0+layers.1'");
      }
    }
    modules.push_back(module);
  }
  if (modules.size() > 1 && options.checkpoint) {
    fail(ExitCode::kPlanning, "fully_shard('" + name +
                                  "'): a merged unit cannot be checkpointed; checkpoint units "
                                  "of one module");
  }
  std::sort(modules.begin(), modules.end());  // definition order
  for (int module : modules) check_registrable(module, display_name(ir.modules[module].path));
  for (int module : modules) model_.unit_scope_[module] = id_;
  units_.push_back(modules);
  checkpoint_.push_back(options.checkpoint);
  reshard_after_forward_.push_back(options.reshard_after_forward);
}

void ShardingScope::check_registrable(int module, const std::string& name) const {
  const ModelIR& ir = model_.ir_;
  const int owner = model_.unit_scope_[module];
  if (owner != -1) {
    fail(ExitCode::kPlanning, "module " + name + " is already a unit (registered in " +
                                  (owner == id_ ? std::string("this scope") : scope_label(owner)) +
                                  "); a module can be sharded only once");
  }
  // Units of other scopes among the module's ancestors and its subtree (contiguous in preorder).
  auto check_foreign = [&](int m, bool inside) {
    const int other = model_.unit_scope_[m];
    if (other == -1 || other == id_) return;
    const std::string other_name = display_name(ir.modules[m].path);
    if (inside) {
      fail(ExitCode::kPlanning, "module " + name + " contains " + other_name +
                                    ", a unit registered in " + scope_label(other) +
                                    "; its forward would run a unit of another scope; shard " +
                                    name + " in that scope or leave it out");
    }
    fail(ExitCode::kPlanning, "module " + name + " is inside " + other_name +
                                  ", a unit registered in " + scope_label(other) +
                                  ", which already owns its parameters");
  };
  for (int m = ir.modules[module].parent; m != -1; m = ir.modules[m].parent)
    check_foreign(m, false);
  for (size_t m = module + 1; m < ir.modules.size() && ir.contains(module, m); ++m) {
    check_foreign(static_cast<int>(m), true);
  }
}

void ShardingScope::use_trace(TracedRun run) {
  if (finalized_) {
    fail(ExitCode::kPlanning, "use_trace() after the scope was finalized; give the trace first");
  }
  trace_ = std::move(run);
}

schema::Plan ShardingScope::finalize() {
  if (finalized_) {
    fail(ExitCode::kPlanning, "finalize() called twice; a scope is finalized exactly once");
  }
  if (units_.empty()) {
    fail(ExitCode::kPlanning,
         "the sharding scope registered no units; call fully_shard() for "
         "at least one module before finalize()");
  }
  PlanIR ir;
  ir.model = &model_.ir_;
  ir.model_info = model_.info();
  ir.mesh = mesh_;
  ir.policy = policy_;
  std::vector<std::vector<std::string>> paths;
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitIR unit;
    unit.modules = units_[u];
    unit.module = units_[u].front();
    unit.checkpoint = checkpoint_[u];
    unit.reshard_after_forward = reshard_after_forward_[u].value_or(policy_.reshard_after_forward);
    ir.units.push_back(unit);
    std::vector<std::string> unit_paths;
    for (int m : units_[u]) unit_paths.push_back(model_.ir_.modules[m].path);
    paths.push_back(unit_paths);
  }
  if (trace_ && trace_->units != paths) {
    fail(ExitCode::kPlanning,
         "the trace was recorded for other units than the scope registered, or in another "
         "order; trace the registered units, in registration order");
  }
  const auto traced_checkpoint = [&](size_t u) {
    return u < trace_->checkpointed.size() && trace_->checkpointed[u];
  };
  bool same_checkpoints = true;
  for (size_t u = 0; trace_ && u < units_.size(); ++u) {
    same_checkpoints = same_checkpoints && traced_checkpoint(u) == checkpoint_[u];
  }
  if (!same_checkpoints) {
    fail(ExitCode::kPlanning,
         "the trace checkpointed other units than the scope registers as checkpointed; trace "
         "with the scope's checkpointed units");
  }
  ir.traced_run = trace_;
  link_units(ir);
  assign_ownership(ir);
  lay_out_groups(ir);
  derive_orders(ir);
  build_schedule(ir);
  assign_slots(ir);
  measure_activations(ir);
  schema::Plan plan = emit_plan(ir);
  // The verifier: every plan the planner emits passes the checks a loader applies, so a
  // planner bug is caught here, naming the field, instead of at the first run's load.
  // A scope may leave parameters in no unit (the plan says so, ownership.unmanaged); such a
  // plan is one `mfsdp run` refuses to load, and the only rule it may break is the count.
  const bool partial =
      std::any_of(plan.diagnostics.begin(), plan.diagnostics.end(),
                  [](const schema::Diagnostic& d) { return d.code == "ownership.unmanaged"; });
  std::vector<schema::Problem> problems = schema::check_plan(plan);
  problems.erase(std::remove_if(problems.begin(), problems.end(),
                                [&](const schema::Problem& p) {
                                  return partial && (p.path == "model.parameters" ||
                                                     p.path == "model.parameter_numel");
                                }),
                 problems.end());
  if (!problems.empty()) {
    fail(ExitCode::kInternal, "the planner made a plan that breaks the plan rules (" +
                                  problems.front().str() +
                                  "); this is a bug in mfsdp: please report it with the model "
                                  "and the flags");
  }
  finalized_ = true;
  close();
  return plan;
}

void fully_shard(const std::string& path, UnitOptions options) {
  if (!active_scope) {
    fail(ExitCode::kPlanning, "fully_shard('" + display_name(path) +
                                  "') outside a sharding scope; open a ShardingScope first");
  }
  active_scope->fully_shard(path, options);
}

void fully_shard(const std::vector<std::string>& paths, UnitOptions options) {
  if (!active_scope) {
    fail(ExitCode::kPlanning, "fully_shard('" + schema::unit_name_of(paths) +
                                  "') outside a sharding scope; open a ShardingScope first");
  }
  active_scope->fully_shard(paths, options);
}

}  // namespace mfsdp::planner
