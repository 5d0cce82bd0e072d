// link_units: where each unit sits among the others.
#include "planner/passes.h"
#include "schema/error.h"

namespace mfsdp::planner {
namespace {

// A merged unit's modules run one after another, each once per call, in the static call
// graph: no other unit runs between them, none under an `if` or in a loop.
void check_merged_calls(const PlanIR& ir) {
  const ModelIR& model = *ir.model;
  std::vector<int> open(ir.units.size(), 0);  // per merged unit: modules ended in its call
  std::vector<int> calls(model.modules.size(), 0);
  int between = -1;  // a merged unit whose call is open while none of its modules runs
  for (const CallEvent& e : model.trace) {
    if (e.kind == CallEvent::Kind::kRead) continue;
    const int u = ir.unit_of_module(e.module);
    if (u == -1) continue;
    const UnitIR& unit = ir.units[u];
    const bool merged = unit.modules.size() > 1;
    if (between != -1 && between != u) {
      fail(ExitCode::kPlanning, "the modules of merged unit '" + ir.units[between].name +
                                    "' do not run one after another in forward (unit '" +
                                    unit.name + "' runs between them); merge adjacent modules");
    }
    if (e.kind == CallEvent::Kind::kEnter) {
      if (!merged) continue;
      const std::string module = display_name(model.modules[e.module].path);
      if (++calls[e.module] > 1 || e.under_if || e.under_loop) {
        fail(ExitCode::kPlanning,
             "module '" + module + "' of merged unit '" + unit.name + "' is " +
                 (calls[e.module] > 1 ? "called more than once"
                                      : (e.under_if ? "called under an if" : "called in a loop")) +
                 " in forward; merge modules that forward calls once each");
      }
      between = -1;
    } else if (merged) {
      between = ++open[u] < static_cast<int>(unit.modules.size()) ? u : -1;
    }
  }
  for (const UnitIR& unit : ir.units) {
    for (int m : unit.modules) {
      if (unit.modules.size() > 1 && calls[m] == 0) {
        fail(ExitCode::kPlanning, "module '" + display_name(model.modules[m].path) +
                                      "' of merged unit '" + unit.name +
                                      "' is never called by forward; merge modules it calls");
      }
    }
  }
}

}  // namespace

void link_units(PlanIR& ir) {
  const ModelIR& model = *ir.model;
  ir.unit_by_module.assign(model.modules.size(), -1);
  for (size_t u = 0; u < ir.units.size(); ++u) {
    UnitIR& unit = ir.units[u];
    if (unit.modules.empty()) unit.modules = {unit.module};
    unit.module = unit.modules.front();
    for (int m : unit.modules) ir.unit_by_module[m] = static_cast<int>(u);
  }
  const auto enclosing_unit = [&](int module) {
    for (int m = model.modules[module].parent; m != -1; m = model.modules[m].parent) {
      if (ir.unit_by_module[m] != -1) return ir.unit_by_module[m];
    }
    return -1;
  };
  ir.roots.clear();
  for (size_t u = 0; u < ir.units.size(); ++u) {
    UnitIR& unit = ir.units[u];
    std::vector<std::string> paths;
    for (int m : unit.modules) paths.push_back(model.modules[m].path);
    unit.name = schema::unit_name_of(paths);
    unit.parent = enclosing_unit(unit.module);
    for (int m : unit.modules) {
      if (enclosing_unit(m) != unit.parent) {
        fail(ExitCode::kPlanning,
             "the modules of merged unit '" + unit.name +
                 "' lie in different units; merge modules that sit in the same unit (e.g. "
                 "siblings such as 'layers.0+layers.1')");
      }
    }
    unit.root = unit.parent == -1;
    if (unit.root) ir.roots.push_back(static_cast<int>(u));
  }
  // A merged unit's hooks see its modules, not what they hold: it may hold no other unit.
  for (const UnitIR& unit : ir.units) {
    if (unit.parent != -1 && ir.units[unit.parent].modules.size() > 1) {
      fail(ExitCode::kPlanning, "merged unit '" + ir.units[unit.parent].name + "' contains unit '" +
                                    unit.name +
                                    "'; a merged unit may hold no other unit: merge the "
                                    "modules without it, or leave it out");
    }
  }
  check_merged_calls(ir);
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
