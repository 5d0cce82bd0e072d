// lay_out_groups: one flat buffer per (dtype, requires_grad) group of a unit, laid out so that
// every shard rank gets an equal, aligned, contiguous range.
#include "planner/passes.h"
#include "schema/plan_rules.h"

namespace mfsdp::planner {

void lay_out_groups(PlanIR& ir) {
  const int64_t shards = ir.mesh.shard_size;
  for (UnitIR& unit : ir.units) {
    unit.groups.clear();
    for (int t : unit.params) {
      const TensorInfo& tensor = ir.model->tensors[t];
      schema::Group* group = nullptr;
      for (auto& g : unit.groups) {
        if (g.dtype == tensor.dtype && g.requires_grad == tensor.requires_grad) group = &g;
      }
      if (!group) {
        unit.groups.push_back({tensor.dtype, tensor.requires_grad, 0, 0, 0, {}});
        group = &unit.groups.back();
      }
      schema::ParamLayout param;
      param.name = tensor.names.front();
      param.aliases.assign(tensor.names.begin() + 1, tensor.names.end());
      param.shape = tensor.shape;
      param.numel = tensor.numel();
      // Sizes are checked: an absurd alignment must fail with a message, not wrap.
      param.offset =
          schema::padded_numel(group->numel, 1, schema::align_elems(ir.policy, tensor.dtype));
      group->numel =
          schema::add_sizes(param.offset, param.numel,
                            "unit '" + unit.name + "': numel of its " + tensor.dtype + " group");
      group->params.push_back(std::move(param));
    }
    schema::Unit sizes;
    sizes.name = unit.name;
    for (auto& g : unit.groups) {
      g.padded_numel =
          schema::padded_numel(g.numel, shards, schema::align_elems(ir.policy, g.dtype));
      g.shard_numel = g.padded_numel / shards;
    }
    sizes.groups = unit.groups;
    unit.sharded_bytes = schema::unit_sharded_bytes(sizes);
    unit.unsharded_bytes = schema::unit_unsharded_bytes(ir.policy, sizes);
  }
}

}  // namespace mfsdp::planner
