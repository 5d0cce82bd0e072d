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

}  // namespace mfsdp::planner
