// derive_orders: unit forward/backward orders from the call trace, not from definition order.
#include <algorithm>

#include "planner/passes.h"

namespace mfsdp::planner {
namespace {

// Units of `order` outside one longest run that keeps definition order: the fewest units whose
// moves explain the difference.
std::vector<bool> moved_units(const std::vector<int>& definition_rank) {
  const size_t n = definition_rank.size();
  std::vector<int> tail_index, prev(n, -1);  // patience sorting
  for (size_t i = 0; i < n; ++i) {
    auto it = std::lower_bound(tail_index.begin(), tail_index.end(), definition_rank[i],
                               [&](int idx, int value) { return definition_rank[idx] < value; });
    if (it != tail_index.begin()) prev[i] = *(it - 1);
    if (it == tail_index.end()) {
      tail_index.push_back(static_cast<int>(i));
    } else {
      *it = static_cast<int>(i);
    }
  }
  std::vector<bool> moved(n, true);
  for (int i = tail_index.empty() ? -1 : tail_index.back(); i != -1; i = prev[i]) moved[i] = false;
  return moved;
}

}  // namespace

void derive_orders(PlanIR& ir) {
  const ModelIR& model = *ir.model;
  ir.unit_trace.clear();
  std::vector<std::vector<int64_t>> open(ir.units.size());
  for (auto& unit : ir.units) unit.call_count = 0;
  for (const CallEvent& e : model.trace) {
    if (e.kind == CallEvent::Kind::kRead) continue;
    const int u = ir.unit_of_module(e.module);
    if (u == -1) continue;
    UnitIR& unit = ir.units[u];
    if (e.kind == CallEvent::Kind::kEnter) {
      open[u].push_back(unit.call_count);
      ir.unit_trace.push_back({true, u, unit.call_count++});
      unit.conditional = unit.conditional || e.under_if;
      unit.repeated = unit.repeated || e.under_loop;
    } else {
      ir.unit_trace.push_back({false, u, open[u].back()});
      open[u].pop_back();
    }
  }

  ir.forward_order.clear();
  for (const UnitCall& c : ir.unit_trace) {
    if (c.enter && c.call == 0) ir.forward_order.push_back(c.unit);
  }
  ir.backward_order.clear();
  for (auto c = ir.unit_trace.rbegin(); c != ir.unit_trace.rend(); ++c) {
    if (!c->enter && c->call == ir.units[c->unit].call_count - 1) {
      ir.backward_order.push_back(c->unit);
    }
  }

  for (const UnitIR& unit : ir.units) {
    if (unit.call_count == 0) {
      ir.diagnose("warning", "unit.never_called",
                  "unit " + unit.name +
                      " is not called by forward: it is never gathered and its "
                      "parameters get no gradients; remove it from the scope if that is unintended",
                  unit.name);
    }
    if (unit.params.empty()) {
      ir.diagnose("info", "unit.empty",
                  "unit " + unit.name +
                      " owns no parameters; it only marks a boundary and "
                      "issues no collectives",
                  unit.name);
    }
    if (unit.call_count > 1) {
      ir.diagnose("info", "unit.called_multiple_times",
                  "unit " + unit.name + " is called " + std::to_string(unit.call_count) +
                      " times in forward; it stays gathered from its first call to its last, "
                      "and its gradients are reduced once, after its last backward",
                  unit.name);
    }
    if (unit.conditional) {
      ir.diagnose("warning", "unit.conditional",
                  "unit " + unit.name +
                      " is called under data-dependent control flow "
                      "(prim::If); the schedule assumes every branch runs, and the executor "
                      "reports where a step diverges from it",
                  unit.name);
    }
    if (unit.repeated) {
      ir.diagnose("warning", "unit.in_loop",
                  "unit " + unit.name +
                      " is called inside a prim::Loop; the plan counts one "
                      "call per call site, and the executor reports where a step diverges from it",
                  unit.name);
    }
  }

  // Definition order is what named_modules() gives: module preorder.
  std::vector<int> by_definition = ir.forward_order;
  std::sort(by_definition.begin(), by_definition.end(),
            [&](int a, int b) { return ir.units[a].module < ir.units[b].module; });
  std::vector<int> definition_rank(ir.units.size());
  for (size_t i = 0; i < by_definition.size(); ++i) definition_rank[by_definition[i]] = i;
  std::vector<int> rank(ir.forward_order.size());
  for (size_t i = 0; i < ir.forward_order.size(); ++i)
    rank[i] = definition_rank[ir.forward_order[i]];
  const std::vector<bool> moved = moved_units(rank);
  const std::string total = std::to_string(ir.forward_order.size());
  for (size_t i = 0; i < ir.forward_order.size(); ++i) {
    if (!moved[i]) continue;
    const std::string& name = ir.units[ir.forward_order[i]].name;
    ir.diagnose("info", "order.differs_from_definition",
                "unit " + name + " runs at forward position " + std::to_string(i + 1) + " of " +
                    total + " but is defined at position " + std::to_string(rank[i] + 1) +
                    "; a definition-order prefetch (as in Megatron-FSDP v2) would gather it at the "
                    "wrong time",
                name);
  }
}

}  // namespace mfsdp::planner
