// emit_plan: the IR in plan-file form. Units are listed in definition order so that a diff of
// two plans lines up; roots keep registration order.
#include <algorithm>
#include <map>

#include "planner/passes.h"
#include "schema/plan_rules.h"

namespace mfsdp::planner {
namespace {

std::vector<std::string> names(const PlanIR& ir, const std::vector<int>& units) {
  std::vector<std::string> out;
  for (int u : units) out.push_back(ir.units[u].name);
  return out;
}

}  // namespace

schema::Plan emit_plan(const PlanIR& ir) {
  schema::Plan plan;
  plan.generator = std::string("mfsdp ") + MFSDP_VERSION;
  plan.model = ir.model_info;
  plan.mesh = ir.mesh;
  plan.policy = ir.policy;
  plan.streams = schema::expected_streams(ir.policy);

  std::vector<int> by_definition(ir.units.size());
  for (size_t u = 0; u < ir.units.size(); ++u) by_definition[u] = static_cast<int>(u);
  std::sort(by_definition.begin(), by_definition.end(),
            [&](int a, int b) { return ir.units[a].module < ir.units[b].module; });
  std::map<std::string, const schema::Unit*> unit_by_name;
  for (int u : by_definition) {
    const UnitIR& in = ir.units[u];
    schema::Unit out;
    out.name = in.name;
    for (int m : in.modules) {
      if (!out.type.empty()) out.type += schema::kModuleJoiner;
      out.type += ir.model->modules[m].type;
      if (in.modules.size() > 1) out.modules.push_back(ir.model->modules[m].path);
    }
    if (in.parent != -1) out.parent = ir.units[in.parent].name;
    out.root = in.root;
    out.call_count = in.call_count;
    out.conditional = in.conditional;
    out.repeated = in.repeated;
    out.kept_after_forward = in.kept_after_forward;
    out.checkpoint = in.checkpoint;
    out.unsharded_bytes = in.unsharded_bytes;
    out.sharded_bytes = in.sharded_bytes;
    out.groups = in.groups;
    for (int t : in.buffers) {
      const TensorInfo& b = ir.model->tensors[t];
      out.buffers.push_back({b.names.front(), b.shape, b.dtype});
    }
    plan.units.push_back(std::move(out));
  }
  for (const auto& unit : plan.units) unit_by_name[unit.name] = &unit;

  plan.roots = names(ir, ir.roots);
  plan.forward_order = names(ir, ir.forward_order);
  plan.backward_order = names(ir, ir.backward_order);
  plan.schedule = ir.schedule;

  plan.memory = ir.memory;
  plan.memory.sharded_param_bytes = 0;
  plan.memory.sharded_grad_bytes = 0;
  schema::Memory& memory = plan.memory;
  for (const auto& unit : plan.units) {
    memory.sharded_param_bytes = schema::add_sizes(memory.sharded_param_bytes, unit.sharded_bytes,
                                                   "memory.sharded_param_bytes");
    memory.sharded_grad_bytes = schema::add_sizes(
        memory.sharded_grad_bytes, schema::unit_gradient_shard_bytes(ir.policy, unit),
        "memory.sharded_grad_bytes");
  }

  schema::Communication& communication = plan.communication;
  for (const auto& e : plan.schedule) {
    for (const auto& name : e.all_gather) {
      ++communication.all_gather_count;
      communication.all_gather_bytes =
          schema::add_sizes(communication.all_gather_bytes, unit_by_name.at(name)->unsharded_bytes,
                            "communication.all_gather_bytes");
    }
    for (const auto& name : e.reduce_scatter) {
      const schema::Unit& unit = *unit_by_name.at(name);
      ++communication.reduce_scatter_count;
      communication.reduce_scatter_bytes = schema::add_sizes(
          communication.reduce_scatter_bytes, schema::unit_reduce_scatter_bytes(ir.policy, unit),
          "communication.reduce_scatter_bytes");
      if (ir.mesh.replicate_size > 1) {
        communication.all_reduce_bytes = schema::add_sizes(
            communication.all_reduce_bytes, schema::unit_gradient_shard_bytes(ir.policy, unit),
            "communication.all_reduce_bytes");
      }
    }
  }
  // Readers add these up (mfsdp diff's totals) and refuse a plan whose sums do not fit.
  const std::optional<int64_t> per_rank = schema::per_rank_bytes(memory);
  if (!per_rank) {
    schema::fail_size_overflow("the per-rank memory (sharded params + grads + slots)");
  }
  if (memory.activations) {
    memory.activations->combined_peak_bytes = schema::add_sizes(
        *per_rank, memory.activations->peak_bytes, "memory.activations.combined_peak_bytes");
  }
  if (!schema::communication_bytes(communication)) {
    schema::fail_size_overflow("the communication of one microbatch (all collectives)");
  }
  plan.diagnostics = ir.diagnostics;
  plan.trace = ir.trace;
  return plan;
}

}  // namespace mfsdp::planner
