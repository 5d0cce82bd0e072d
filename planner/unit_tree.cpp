// link_units: where each unit sits among the others.
#include "planner/passes.h"
#include "schema/error.h"

namespace mfsdp::planner {

void link_units(PlanIR& ir) {
  const ModelIR& model = *ir.model;
  ir.unit_by_module.assign(model.modules.size(), -1);
  for (size_t u = 0; u < ir.units.size(); ++u) ir.unit_by_module[ir.units[u].module] = u;
  ir.roots.clear();
  for (size_t u = 0; u < ir.units.size(); ++u) {
    UnitIR& unit = ir.units[u];
    unit.name = display_name(model.modules[unit.module].path);
    unit.parent = -1;
    for (int m = model.modules[unit.module].parent; m != -1; m = model.modules[m].parent) {
      if (ir.unit_by_module[m] != -1) {
        unit.parent = ir.unit_by_module[m];
        break;
      }
    }
    unit.root = unit.parent == -1;
    if (unit.root) ir.roots.push_back(static_cast<int>(u));
  }
  // A recompute re-runs a checkpointed unit's forward without hooks: no unit may be inside.
  for (const UnitIR& unit : ir.units) {
    if (unit.parent != -1 && ir.units[unit.parent].checkpoint) {
      const std::string& outer = ir.units[unit.parent].name;
      fail(ExitCode::kPlanning,
           "unit '" + outer + "' is checkpointed but contains unit '" + unit.name +
               "'; checkpoint units that hold no other unit (e.g. '" + unit.name + "')");
    }
  }
}

}  // namespace mfsdp::planner
