#include "planner/torchscript/instrumentation.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include "planner/torchscript/model_ir.h"
#include "planner/torchscript/unit_ops.h"
#include "schema/error.h"
#include "schema/plan.h"

namespace mfsdp::planner {
namespace {

using torch::jit::Graph;
using torch::jit::Value;

constexpr const char* kUnitAttribute = "_mfsdp_unit";

// A module of a unit: the unit itself, or one of a merged unit's modules.
struct Unit {
  std::string name;  // as printed: "<root>" for the model
  torch::jit::Module module;
  size_t unit = 0;     // index of its unit
  int64_t member = 0;  // its place among the unit's modules
  int64_t members = 1;
};

// A unit class: its forward graph is rewritten once, whatever the number of its instances.
struct HookedClass {
  c10::ClassTypePtr type;
  torch::jit::GraphFunction* forward = nullptr;
  std::string first_unit;     // for messages
  bool checkpointed = false;  // some instance is: forward also reports its arguments
};

bool is_tensor(const c10::TypePtr& type) {
  return type->kind() == c10::TypeKind::TensorType;
}

// Whether a value of `type` can hold a tensor (objects and Any can, so they count).
bool may_hold_tensor(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
    case c10::TypeKind::ClassType:
    case c10::TypeKind::InterfaceType:
    case c10::TypeKind::AnyType:
    case c10::TypeKind::AnyListType:
    case c10::TypeKind::AnyTupleType:
    case c10::TypeKind::AnyClassType:
      return true;
    default:
      for (const c10::TypePtr& contained : type->containedTypes()) {
        if (may_hold_tensor(contained)) return true;
      }
      return false;
  }
}

// Tensor, a tuple of tensors and tensor-free values, a list of tensors, or nothing tensor-like.
bool hookable_output(const c10::TypePtr& type) {
  if (is_tensor(type)) return true;
  if (auto tuple = type->cast<c10::TupleType>()) {
    for (const c10::TypePtr& element : tuple->elements()) {
      if (!is_tensor(element) && may_hold_tensor(element)) return false;
    }
    return true;
  }
  if (auto list = type->cast<c10::ListType>(); list && is_tensor(list->getElementType())) {
    return true;
  }
  return !may_hold_tensor(type);
}

std::string class_name(const c10::ClassTypePtr& type) {
  return type->name() ? type->name()->name() : type->str();
}

Unit find_unit(const torch::jit::Module& model, const std::string& path) {
  const std::string plain = path == schema::kRootName ? "" : path;
  Unit unit{display_name(plain), model};
  size_t begin = 0;
  while (begin < plain.size()) {
    const size_t end = std::min(plain.find('.', begin), plain.size());
    const c10::IValue child = unit.module.attr(plain.substr(begin, end - begin), c10::IValue());
    if (!child.isModule()) {
      fail(ExitCode::kPlanning, "unit '" + unit.name +
                                    "' is not a module of the model; use a fully-qualified "
                                    "module path such as 'layers.0'");
    }
    unit.module = child.toModule();
    begin = end + 1;
  }
  return unit;
}

// Whether `fn` has been compiled: run, or inlined into a caller that ran. LibTorch 1.13 has
// no query for that, but both build and cache the function's optimised graph first. So mark
// the graph, fetch the optimised graph with optimisation off (then a fresh one is a plain
// copy), and see whether it carries the mark; a fresh one is dropped again.
bool already_compiled(torch::jit::GraphFunction& fn) {
  constexpr const char* kMark = "mfsdp_compile_probe";
  Value* self = fn.graph()->inputs().at(0);
  const std::string name = self->hasDebugName() ? self->debugName() : "";
  self->setDebugName(kMark);
  bool fresh = false;
  try {
    torch::jit::GraphOptimizerEnabledGuard plain_copy(false);  // a thread-local flag
    fresh = fn.optimized_graph()->inputs().at(0)->debugName() == kMark;
  } catch (...) {
    self->setDebugName(name);
    throw;
  }
  self->setDebugName(name);
  if (fresh) fn.clear_optimized_graphs();
  return !fresh;
}

// Arguments a recompute can re-create: tensors, values without tensors, and lists, tuples and
// optionals of those.
bool recomputable_argument(const c10::TypePtr& type) {
  if (is_tensor(type) || !may_hold_tensor(type)) return true;
  if (auto optional = type->cast<c10::OptionalType>()) {
    return recomputable_argument(optional->getElementType());
  }
  if (auto list = type->cast<c10::ListType>()) return recomputable_argument(list->getElementType());
  if (auto tuple = type->cast<c10::TupleType>()) {
    for (const c10::TypePtr& element : tuple->elements()) {
      if (!recomputable_argument(element)) return false;
    }
    return true;
  }
  return false;
}

// Inserts `op(unit, [tensors])` and returns the tensors it gives back, in order.
std::vector<Value*> call_unit_op(Graph& graph, const char* op, Value* unit,
                                 const std::vector<Value*>& tensors) {
  Value* list = graph.insertNode(graph.createList(c10::TensorType::get(), tensors))->output();
  torch::jit::Node* call =
      graph.insertNode(graph.create(c10::Symbol::fromQualString(op), {unit, list}));
  call->output()->setType(c10::ListType::ofTensors());
  if (tensors.empty()) return {};
  return graph.insertNode(graph.createListUnpack(call->output(), tensors.size()))->outputs().vec();
}

// The value to return instead of `out`, its tensors passed through unit_exit in one call.
Value* exit_value(Graph& graph, Value* unit, Value* out) {
  const c10::TypePtr& type = out->type();
  if (is_tensor(type)) return call_unit_op(graph, kUnitExitOp, unit, {out}).front();
  if (auto list = type->cast<c10::ListType>(); list && is_tensor(list->getElementType())) {
    torch::jit::Node* call =
        graph.insertNode(graph.create(c10::Symbol::fromQualString(kUnitExitOp), {unit, out}));
    call->output()->setType(c10::ListType::ofTensors());
    return call->output();
  }
  auto tuple = type->cast<c10::TupleType>();
  if (!tuple) {  // nothing tensor-like: still report the unit's exit
    call_unit_op(graph, kUnitExitOp, unit, {});
    return out;
  }
  std::vector<Value*> elements = graph.insertNode(graph.createTupleUnpack(out))->outputs().vec();
  std::vector<Value*> tensors;
  for (Value* e : elements) {
    if (is_tensor(e->type())) tensors.push_back(e);
  }
  std::vector<Value*> wrapped = call_unit_op(graph, kUnitExitOp, unit, tensors);
  auto next = wrapped.begin();
  for (Value*& e : elements) {
    if (is_tensor(e->type())) e = *next++;
  }
  return graph.insertNode(graph.createTuple(elements, tuple->schema() ? tuple : nullptr))->output();
}

// forward(self, ...): unit = self._mfsdp_unit; the tensor arguments go through unit_enter
// before anything reads them, the returned tensors through unit_exit. With `report_call`,
// unit_call(unit, self, (arguments...)) comes first, for a checkpointed unit's recompute.
void hook_forward(Graph& graph, bool report_call) {
  Value* self = graph.inputs().at(0);
  Value* unit = nullptr;
  {
    // The tensor arguments' uses, before unit_enter (and unit_call's tuple, which keeps the
    // arguments as given) become uses themselves.
    std::vector<Value*> tensors;
    std::vector<std::vector<torch::jit::Use>> uses;
    for (Value* input : graph.inputs().slice(1)) {
      if (!is_tensor(input->type())) continue;
      tensors.push_back(input);
      uses.push_back(input->uses());
    }
    torch::jit::WithInsertPoint at_entry(graph.param_node()->next());
    unit = graph.insertGetAttr(self, kUnitAttribute);
    if (report_call) {
      Value* args = graph.insertNode(graph.createTuple(graph.inputs().slice(1).vec()))->output();
      graph.insertNode(graph.create(c10::Symbol::fromQualString(kUnitCallOp), {unit, self, args},
                                    /*num_outputs=*/0));
    }
    const std::vector<Value*> entered = call_unit_op(graph, kUnitEnterOp, unit, tensors);
    for (size_t i = 0; i < tensors.size(); ++i) {
      for (const torch::jit::Use& use : uses[i]) use.user->replaceInput(use.offset, entered[i]);
    }
  }
  torch::jit::WithInsertPoint at_return(graph.return_node());
  graph.return_node()->replaceInput(0, exit_value(graph, unit, graph.outputs().at(0)));
  graph.lint();
}

// The modules of every unit, in order; each must be a distinct module instance.
std::vector<Unit> find_units(const torch::jit::Module& model,
                             const std::vector<std::vector<std::string>>& unit_modules) {
  std::vector<Unit> units;
  for (size_t u = 0; u < unit_modules.size(); ++u) {
    if (unit_modules[u].empty()) {
      fail(ExitCode::kPlanning, "unit " + std::to_string(u) + " has no module; name one");
    }
    const auto members = static_cast<int64_t>(unit_modules[u].size());
    if (members > 32767) {  // the operators' id holds a module's place in 16 bits (unit_ops.h)
      fail(ExitCode::kPlanning, "unit " + std::to_string(u) + " merges " + std::to_string(members) +
                                    " modules; merge at most 32767, or shard their parent");
    }
    for (int64_t m = 0; m < members; ++m) {
      Unit unit = find_unit(model, unit_modules[u][static_cast<size_t>(m)]);
      unit.unit = u;
      unit.member = m;
      unit.members = members;
      for (const Unit& other : units) {
        if (other.module._ivalue() == unit.module._ivalue()) {
          fail(ExitCode::kPlanning, "units '" + other.name + "' and '" + unit.name +
                                        "' are the same module instance; list it once");
        }
      }
      units.push_back(std::move(unit));
    }
  }
  return units;
}

void reject_instrumented(const torch::jit::Module& model) {
  for (const auto& named : model.named_modules()) {
    if (named.value.type()->hasAttribute(kUnitAttribute)) {
      fail(ExitCode::kPlanning, "the model is already instrumented (module '" +
                                    display_name(named.name) + "' has " + kUnitAttribute +
                                    "); instrument a freshly loaded model once");
    }
  }
}

// A checkpointed unit holds no other unit, and its forward's arguments can be re-created.
void check_checkpointed(const std::vector<Unit>& units, size_t i) {
  const Unit& unit = units[i];
  for (const auto& inner : unit.module.named_modules()) {
    for (const Unit& other : units) {
      if (other.module._ivalue() == inner.value._ivalue() && &other != &unit) {
        fail(ExitCode::kPlanning,
             "unit '" + unit.name + "' is checkpointed but contains unit '" + other.name +
                 "'; checkpoint units that hold no other unit (e.g. '" + other.name + "')");
      }
    }
  }
  torch::jit::Function* forward = unit.module.type()->findMethod("forward");
  if (!forward) return;  // hooked_classes names the problem
  const std::shared_ptr<Graph> graph = torch::jit::toGraphFunction(*forward).graph();
  for (Value* input : graph->inputs().slice(1)) {
    if (recomputable_argument(input->type())) continue;
    fail(ExitCode::kPlanning,
         "unit '" + unit.name + "' is checkpointed, but its forward takes '" +
             input->debugNameBase() + "' of type " + input->type()->annotation_str() +
             "; a recompute can re-create tensors, lists, tuples and optionals of them, and "
             "values without tensors: do not checkpoint this unit");
  }
}

// The distinct classes of the units, each checked to have a forward whose outputs can be hooked.
std::vector<HookedClass> hooked_classes(const std::vector<Unit>& units,
                                        const std::vector<bool>& checkpointed) {
  std::vector<HookedClass> classes;
  for (size_t i = 0; i < units.size(); ++i) {
    const Unit& unit = units[i];
    const c10::ClassTypePtr& type = unit.module.type();
    const bool checkpoint = unit.unit < checkpointed.size() && checkpointed[unit.unit];
    if (checkpoint && unit.members > 1) {
      fail(ExitCode::kPlanning, "unit '" + unit.name +
                                    "' is one of a merged unit's modules, which cannot be "
                                    "checkpointed; checkpoint units of one module");
    }
    if (checkpoint) check_checkpointed(units, i);
    auto same_type = [&](const HookedClass& c) { return c.type == type; };
    auto known = std::find_if(classes.begin(), classes.end(), same_type);
    if (known != classes.end()) {
      known->checkpointed = known->checkpointed || checkpoint;
      continue;
    }
    torch::jit::Function* forward = type->findMethod("forward");
    if (!forward) {
      fail(ExitCode::kPlanning, "unit '" + unit.name + "' (" + class_name(type) +
                                    ") has no forward method, so mfsdp cannot hook it; make "
                                    "the modules it holds units instead");
    }
    torch::jit::GraphFunction& fn = torch::jit::toGraphFunction(*forward);
    const c10::TypePtr& output = fn.graph()->outputs().at(0)->type();  // methods return one value
    if (!hookable_output(output)) {
      fail(ExitCode::kPlanning, "unit '" + unit.name + "' (" + class_name(type) + ") returns " +
                                    output->annotation_str() +
                                    "; mfsdp can only hook Tensor, tuples and lists of "
                                    "Tensor outputs");
    }
    classes.push_back({type, &fn, unit.name, checkpoint});
  }
  return classes;
}

// Executors compile a graph once (inlining callees); later changes to it are ignored.
void reject_compiled(const torch::jit::Module& model, const std::vector<HookedClass>& classes) {
  auto reject = [](const std::string& what) {
    fail(ExitCode::kPlanning, "cannot instrument units: " + what +
                                  " has already run, and TorchScript keeps the graph it "
                                  "compiled then; call instrument_units right after "
                                  "torch::jit::load, before the first forward");
  };
  torch::jit::Function* root = model.type()->findMethod("forward");
  if (root && already_compiled(torch::jit::toGraphFunction(*root))) {
    reject("the model's forward");
  }
  for (const HookedClass& hooked : classes) {
    if (already_compiled(*hooked.forward)) {
      reject("the forward of " + class_name(hooked.type) + " (the class of unit '" +
             hooked.first_unit + "')");
    }
  }
}

// Every instance of a unit class runs the rewritten graph and reads its id from itself: its
// unit's index (and for a merged unit's module, its place: unit_ops.h), or -1 for an instance
// that is not a unit.
void tag_instances(const torch::jit::Module& model, const std::vector<Unit>& units,
                   const std::vector<HookedClass>& classes) {
  std::unordered_map<const c10::ivalue::Object*, int64_t> unit_id;
  for (const Unit& unit : units) {
    unit_id.emplace(unit.module._ivalue().get(),
                    unit_ops_id(static_cast<int64_t>(unit.unit), unit.member, unit.members));
  }
  for (torch::jit::Module module : model.modules()) {
    auto hooked = [&](const HookedClass& c) { return c.type == module.type(); };
    if (std::none_of(classes.begin(), classes.end(), hooked)) continue;
    const auto unit = unit_id.find(module._ivalue().get());
    module.register_attribute(kUnitAttribute, c10::IntType::get(),
                              unit == unit_id.end() ? -1 : unit->second);
  }
}

}  // namespace

void instrument_units(torch::jit::Module& model, const std::vector<std::string>& unit_paths,
                      const std::vector<bool>& checkpointed) {
  std::vector<std::vector<std::string>> unit_modules;
  for (const std::string& path : unit_paths) unit_modules.push_back({path});
  instrument_unit_modules(model, unit_modules, checkpointed);
}

void instrument_unit_modules(torch::jit::Module& model,
                             const std::vector<std::vector<std::string>>& unit_modules,
                             const std::vector<bool>& checkpointed) {
  // Everything is checked before anything changes, so a rejected model stays as it was.
  const std::vector<Unit> units = find_units(model, unit_modules);
  reject_instrumented(model);
  const std::vector<HookedClass> classes = hooked_classes(units, checkpointed);
  reject_compiled(model, classes);

  tag_instances(model, units, classes);
  for (const HookedClass& hooked : classes) {
    hook_forward(*hooked.forward->graph(), hooked.checkpointed);
  }
}

}  // namespace mfsdp::planner
