// assign_ownership: a unit owns the parameters of its subtree that no nested unit owns, unless
// a parameter is also used elsewhere; then it moves to the lowest unit that is gathered at
// every use, or planning fails with the units to merge.
#include <algorithm>

#include "planner/passes.h"
#include "schema/error.h"

namespace mfsdp::planner {
namespace {

struct Use {
  int unit = -1;    // innermost unit gathered at the use; -1 for none
  int module = -1;  // module that defines or reads the tensor
  bool read = false;
};

int lowest_common_unit(const PlanIR& ir, int a, int b) {
  std::vector<int> chain;
  for (int u = a; u != -1; u = ir.units[u].parent) chain.push_back(u);
  for (int u = b; u != -1; u = ir.units[u].parent) {
    if (std::find(chain.begin(), chain.end(), u) != chain.end()) return u;
  }
  return -1;
}

int lowest_common_module(const ModelIR& model, int a, int b) {
  for (int m = a; m != -1; m = model.modules[m].parent) {
    if (model.contains(m, b)) return m;
  }
  return 0;
}

std::string describe(const PlanIR& ir, const Use& use) {
  const std::string module = display_name(ir.model->modules[use.module].path);
  return (use.read ? "read by " : "defined in ") + module;
}

}  // namespace

void assign_ownership(PlanIR& ir) {
  const ModelIR& model = *ir.model;
  std::vector<int> enclosing(model.modules.size(), -1);  // modules are in preorder
  for (size_t m = 0; m < model.modules.size(); ++m) {
    const int own = ir.unit_of_module(static_cast<int>(m));
    const int parent = model.modules[m].parent;
    enclosing[m] = own != -1 ? own : (parent == -1 ? -1 : enclosing[parent]);
  }

  std::vector<std::vector<Use>> uses(model.tensors.size());
  std::vector<int> buffer_unit(model.tensors.size(), -1);
  std::vector<bool> buffer_seen(model.tensors.size(), false);
  for (size_t m = 0; m < model.modules.size(); ++m) {
    for (int t : model.modules[m].params) uses[t].push_back({enclosing[m], static_cast<int>(m)});
    for (int t : model.modules[m].buffers) {
      if (!buffer_seen[t]) buffer_unit[t] = enclosing[m];
      buffer_seen[t] = true;
    }
  }
  // The units gathered at each read: a merged unit from its first module's start to its last
  // module's end, between its modules too.
  std::vector<int> unit_stack, module_stack;
  UnitCallTracker calls(ir);
  for (const CallEvent& e : model.trace) {
    if (e.kind == CallEvent::Kind::kEnter) {
      module_stack.push_back(e.module);
      if (const int u = calls.enter(e.module); u != -1) unit_stack.push_back(u);
    } else if (e.kind == CallEvent::Kind::kExit) {
      module_stack.pop_back();
      if (calls.exit(e.module) != -1) unit_stack.pop_back();  // link_units: calls nest
    } else if (model.tensors[e.tensor].is_parameter) {
      uses[e.tensor].push_back(
          {unit_stack.empty() ? -1 : unit_stack.back(), module_stack.back(), true});
    }
  }

  std::vector<std::string> unmanaged;
  for (size_t t = 0; t < model.tensors.size(); ++t) {
    const TensorInfo& tensor = model.tensors[t];
    if (!tensor.is_parameter) {
      if (buffer_unit[t] != -1) ir.units[buffer_unit[t]].buffers.push_back(t);
      continue;
    }
    const std::string& name = tensor.names.front();
    auto managed =
        std::find_if(uses[t].begin(), uses[t].end(), [](const Use& use) { return use.unit != -1; });
    if (managed == uses[t].end()) {
      unmanaged.push_back(name);
      continue;
    }
    const Use& home = *managed;
    int owner = home.unit;
    std::vector<int> users;
    for (const Use& use : uses[t]) {
      if (use.unit == -1) {
        fail(ExitCode::kPlanning,
             "parameter " + name + " (owned by unit " + ir.units[home.unit].name + ") is " +
                 describe(ir, use) +
                 " outside every unit, where it is never gathered; shard a "
                 "module that contains both (e.g. --unit '" +
                 display_name(
                     model.modules[lowest_common_module(model, home.module, use.module)].path) +
                 "')");
      }
      if (std::find(users.begin(), users.end(), use.unit) == users.end()) users.push_back(use.unit);
      const int common = lowest_common_unit(ir, owner, use.unit);
      if (common == -1) {
        const int module = lowest_common_module(model, ir.units[owner].module, use.module);
        fail(ExitCode::kPlanning,
             "parameter " + name + " is used by units " + ir.units[owner].name + " and " +
                 ir.units[use.unit].name + " (" + describe(ir, use) +
                 "), which share no enclosing unit; merge them by sharding a module that "
                 "contains both (e.g. --unit '" +
                 display_name(model.modules[module].path) + "')");
      }
      owner = common;
    }
    ir.units[owner].params.push_back(t);
    if (users.size() > 1) {
      std::string who;
      for (int u : users) who += (who.empty() ? "" : ", ") + ir.units[u].name;
      std::string also;
      for (size_t i = 1; i < tensor.names.size(); ++i)
        also += (also.empty() ? "" : ", ") + tensor.names[i];
      ir.diagnose("info", "ownership.hoisted",
                  "parameter " + name + (also.empty() ? "" : " (also " + also + ")") +
                      " is used by units " + who + "; owned by their lowest common unit " +
                      ir.units[owner].name + ", which stays gathered across every use",
                  name);
    }
  }
  if (!unmanaged.empty()) {
    std::string some;
    for (size_t i = 0; i < unmanaged.size() && i < 5; ++i) some += (i ? ", " : "") + unmanaged[i];
    if (unmanaged.size() > 5) some += ", ...";
    ir.diagnose("warning", "ownership.unmanaged",
                std::to_string(unmanaged.size()) + " parameter(s) (" + some +
                    ") are in no unit of this scope, so this plan does not shard them; shard a "
                    "module that contains them (e.g. '<root>') to cover the whole model",
                unmanaged.front());
  }
}

}  // namespace mfsdp::planner