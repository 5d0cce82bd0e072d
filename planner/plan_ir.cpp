#include "planner/plan_ir.h"

namespace mfsdp::planner {

int PlanIR::unit_of_module(int module) const {
  return module >= 0 && module < static_cast<int>(unit_by_module.size()) ? unit_by_module[module]
                                                                         : -1;
}

void PlanIR::diagnose(std::string severity, std::string code, std::string message,
                      std::string where) {
  diagnostics.push_back(
      {std::move(severity), std::move(code), std::move(message), std::move(where)});
}

UnitCallTracker::UnitCallTracker(const PlanIR& ir)
    : ir_(ir), begun_(ir.units.size(), 0), ended_(ir.units.size(), 0) {}

int UnitCallTracker::enter(int module) {
  const int u = ir_.unit_of_module(module);
  if (u == -1 || ir_.units[u].modules.size() == 1) return u;
  return begun_[u]++ == 0 ? u : -1;
}

int UnitCallTracker::exit(int module) {
  const int u = ir_.unit_of_module(module);
  if (u == -1 || ir_.units[u].modules.size() == 1) return u;
  if (++ended_[u] < ir_.units[u].modules.size()) return -1;
  begun_[u] = ended_[u] = 0;
  return u;
}

}  // namespace mfsdp::planner
