#include "planner/torchscript/torch_model.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

#include <torch/csrc/jit/ir/constants.h>

#include "planner/torchscript/mapped_archive.h"
#include "planner/torchscript/model_loader.h"
#include "schema/error.h"

namespace mfsdp::planner {
namespace {

using ObjectPtr = c10::intrusive_ptr<c10::ivalue::Object>;

const std::pair<c10::ScalarType, const char*> kDtypes[] = {
    {c10::ScalarType::Float, "float32"}, {c10::ScalarType::Double, "float64"},
    {c10::ScalarType::Half, "float16"},  {c10::ScalarType::BFloat16, "bfloat16"},
    {c10::ScalarType::Long, "int64"},    {c10::ScalarType::Int, "int32"},
    {c10::ScalarType::Short, "int16"},   {c10::ScalarType::Char, "int8"},
    {c10::ScalarType::Byte, "uint8"},    {c10::ScalarType::Bool, "bool"}};

}  // namespace

c10::ScalarType scalar_type_of(const std::string& dtype) {
  for (const auto& [type, name] : kDtypes) {
    if (dtype == name) return type;
  }
  fail(ExitCode::kUsage, "unknown dtype '" + dtype + "'");
}

std::string dtype_name_of(c10::ScalarType t, const std::string& what) {
  for (const auto& [type, name] : kDtypes) {
    if (t == type) return name;
  }
  fail(ExitCode::kModel, what + " has dtype " + c10::toString(t) +
                             ", which mfsdp cannot shard; convert it to a real dtype");
}

namespace {

// TorchScript renames re-scripted classes "___torch_mangle_N"; plans must not depend on that.
std::string demangled_type(const torch::jit::Module& m) {
  auto name = m.type()->name();
  if (!name) return "?";
  std::string out;
  for (const auto& atom : name->atoms()) {
    if (atom.rfind("___torch_mangle_", 0) == 0) continue;
    if (!out.empty()) out += '.';
    out += atom;
  }
  return out;
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

class Extractor {
 public:
  explicit Extractor(std::string origin) : origin_(std::move(origin)) {}

  ModelIR run(const torch::jit::Module& model) {
    add_module(model, "", -1);
    auto forward = model.type()->findMethod("forward");
    if (!forward) {
      fail(ExitCode::kModel, origin_ +
                                 ": the module has no forward method; mfsdp plans a model's "
                                 "forward, so script a module that defines one");
    }
    ir_.trace.push_back({CallEvent::Kind::kEnter, 0, -1, false, false});
    walk_method(model._ivalue(), "forward", false, false);
    ir_.trace.push_back({CallEvent::Kind::kExit, 0, -1, false, false});
    return std::move(ir_);
  }

 private:
  void add_module(const torch::jit::Module& m, const std::string& path, int parent) {
    const int index = static_cast<int>(ir_.modules.size());
    ModuleNode node;
    node.path = path;
    node.type = demangled_type(m);
    node.parent = parent;
    ir_.modules.push_back(node);
    module_of_.emplace(m._ivalue().get(), index);
    if (parent >= 0) ir_.modules[parent].children.push_back(index);

    for (const auto& p : m.named_parameters(/*recurse=*/false)) {
      const int t = add_tensor(p.value, join(path, p.name), true);
      ir_.modules[index].params.push_back(t);
    }
    for (const auto& b : m.named_buffers(/*recurse=*/false)) {
      const int t = add_tensor(b.value, join(path, b.name), false);
      ir_.modules[index].buffers.push_back(t);
    }
    for (const auto& child : m.named_children()) {
      // A module instance registered twice keeps its first path; its second registration
      // would otherwise own the same parameters twice.
      if (module_of_.count(child.value._ivalue().get())) continue;
      add_module(child.value, join(path, child.name), index);
    }
  }

  // Tied weights arrive as one TensorImpl registered twice, or (after some transforms) as two
  // TensorImpls viewing the same storage region; both are one tensor to the planner.
  int add_tensor(const at::Tensor& t, const std::string& fqn, bool is_parameter) {
    auto by_impl = tensor_of_impl_.find(t.unsafeGetTensorImpl());
    if (by_impl != tensor_of_impl_.end()) {
      ir_.tensors[by_impl->second].names.push_back(fqn);
      return by_impl->second;
    }
    int index = -1;
    const void* data = t.numel() > 0 ? t.storage().data() : nullptr;
    if (data) {
      auto key = std::make_tuple(data, t.storage_offset(), t.sizes().vec(), t.strides().vec());
      auto by_view = tensor_of_view_.find(key);
      if (by_view != tensor_of_view_.end()) {
        index = by_view->second;
      } else {
        auto storage = storage_owner_.find(data);
        if (storage != storage_owner_.end()) {
          fail(ExitCode::kModel,
               origin_ + ": " + fqn + " and " + ir_.tensors[storage->second].names.front() +
                   " are different views of one storage; mfsdp shards whole parameters, so "
                   "clone one of them before saving the model");
        }
        storage_owner_.emplace(data, static_cast<int>(ir_.tensors.size()));
        tensor_of_view_.emplace(key, static_cast<int>(ir_.tensors.size()));
      }
    }
    if (index >= 0) {
      ir_.tensors[index].names.push_back(fqn);
    } else {
      index = static_cast<int>(ir_.tensors.size());
      TensorInfo info;
      info.names.push_back(fqn);
      info.shape = t.sizes().vec();
      info.dtype = dtype_name_of(t.scalar_type(), origin_ + ": " + fqn);
      info.requires_grad = is_parameter && t.requires_grad();
      info.is_parameter = is_parameter;
      ir_.tensors.push_back(std::move(info));
    }
    tensor_of_impl_.emplace(t.unsafeGetTensorImpl(), index);
    return index;
  }

  struct Context {
    ObjectPtr self;
    std::unordered_map<const torch::jit::Value*, ObjectPtr> objects;
    bool under_if = false;
    bool under_loop = false;
  };

  void walk_method(const ObjectPtr& self, const std::string& method, bool under_if,
                   bool under_loop) {
    auto* fn = self->type()->findMethod(method);
    if (!fn) return;
    const auto& graph = toGraphFunction(*fn).graph();
    Context ctx;
    ctx.self = self;
    ctx.objects.emplace(graph->inputs().at(0), self);
    ctx.under_if = under_if;
    ctx.under_loop = under_loop;
    walk_block(graph->block(), ctx);
  }

  void walk_block(torch::jit::Block* block, Context& ctx) {
    for (torch::jit::Node* node : block->nodes()) {
      const auto kind = node->kind();
      if (kind == c10::prim::GetAttr) {
        on_get_attr(node, ctx);
      } else if (kind == c10::prim::CallMethod) {
        on_call_method(node, ctx);
      } else if (kind == c10::prim::Loop && unroll_loop(node, ctx)) {
        continue;
      } else if (!node->blocks().empty()) {
        const bool saved_if = ctx.under_if, saved_loop = ctx.under_loop;
        if (kind == c10::prim::If) ctx.under_if = true;
        if (kind == c10::prim::Loop) ctx.under_loop = true;
        for (torch::jit::Block* sub : node->blocks()) walk_block(sub, ctx);
        ctx.under_if = saved_if;
        ctx.under_loop = saved_loop;
      }
    }
  }

  // A loop whose trip count the graph fixes (`for _ in range(3)`, `for s in [a, b]`, nested
  // ones too) runs its body that many times in the trace, so call counts and orders are
  // exact; the body is walked once and its events repeated. False (walk it as a loop of
  // unknown count, flagged) when the count or the continue condition depends on data, or the
  // unrolled trace would pass kMaxUnrolledEvents.
  bool unroll_loop(torch::jit::Node* loop, Context& ctx) {
    const std::optional<int64_t> trips = constant_trip_count(loop);
    if (!trips) return false;
    const size_t start = ir_.trace.size();
    walk_block(loop->blocks().at(0), ctx);
    const size_t body = ir_.trace.size() - start;
    if (body == 0) return true;  // nothing to repeat, however long the loop
    if (static_cast<uint64_t>(*trips) > kMaxUnrolledEvents / body) {
      for (size_t i = start; i < ir_.trace.size(); ++i) ir_.trace[i].under_loop = true;
      return true;  // the body once, flagged like a data-dependent loop
    }
    if (*trips == 0) {
      ir_.trace.resize(start);
      return true;
    }
    ir_.trace.reserve(start + body * static_cast<size_t>(*trips));
    for (int64_t turn = 1; turn < *trips; ++turn) {
      for (size_t i = 0; i < body; ++i) ir_.trace.push_back(ir_.trace[start + i]);
    }
    return true;
  }

  // prim::Loop(max_trip_count, start_condition, carried...) with a body whose first output
  // is the condition to go on: a fixed count when the count is a constant (or the length of
  // a list built from a fixed number of elements) and both conditions are constant true.
  static std::optional<int64_t> constant_trip_count(torch::jit::Node* loop) {
    const auto is_true = [](const torch::jit::Value* v) {
      const auto b = torch::jit::constant_as<bool>(v);
      return b && *b;
    };
    if (loop->inputs().size() < 2 || loop->blocks().size() != 1 || !is_true(loop->input(1)) ||
        loop->blocks()[0]->outputs().empty() || !is_true(loop->blocks()[0]->outputs()[0])) {
      return std::nullopt;
    }
    const torch::jit::Value* count = loop->input(0);
    std::optional<int64_t> n;
    if (const auto value = torch::jit::constant_as<int64_t>(count)) {
      n = *value;
    } else if (count->node()->kind() == c10::aten::len && count->node()->inputs().size() == 1) {
      const torch::jit::Value* list = count->node()->input(0);
      if (list->node()->kind() == c10::prim::ListConstruct && only_read(list)) {
        n = static_cast<int64_t>(list->node()->inputs().size());
      } else if (const auto constant = torch::jit::toIValue(list)) {
        if (constant->isList()) n = static_cast<int64_t>(constant->toListRef().size());
      }
    }
    if (!n) return std::nullopt;
    return std::max<int64_t>(*n, 0);
  }

  // Whether a list is only measured and indexed: an append or any other use could change
  // its length after the ListConstruct that gives it.
  static bool only_read(const torch::jit::Value* list) {
    for (const torch::jit::Use& use : list->uses()) {
      const auto kind = use.user->kind();
      if (kind != c10::aten::len && kind != c10::aten::__getitem__) return false;
    }
    return true;
  }

  // Unrolled loops past this many trace events stay loops (a warning), so a loop of a
  // million turns cannot exhaust memory at planning.
  static constexpr uint64_t kMaxUnrolledEvents = 1'000'000;

  void on_get_attr(torch::jit::Node* node, Context& ctx) {
    auto owner = ctx.objects.find(node->input(0));
    if (owner == ctx.objects.end()) return;
    const auto& object = owner->second;
    const auto slot = attribute_slot(*object->type(), node->s(c10::attr::name));
    if (!slot) return;
    const c10::IValue value = object->getSlot(*slot);
    if (value.isObject() && value.toObjectRef().type()->is_module()) {
      ctx.objects.emplace(node->output(), value.toObject());
    } else if (value.isTensor()) {
      auto t = tensor_of_impl_.find(value.toTensor().unsafeGetTensorImpl());
      if (t != tensor_of_impl_.end()) {
        ir_.trace.push_back({CallEvent::Kind::kRead, -1, t->second, ctx.under_if, ctx.under_loop});
      }
    }
  }

  // ClassType::findAttributeSlot is a linear scan; a model's root can hold thousands of
  // attributes, read once each, which would make extraction quadratic.
  std::optional<size_t> attribute_slot(const c10::ClassType& type, const std::string& name) {
    auto& slots = slot_index_[&type];
    if (slots.empty()) {
      for (size_t i = 0; i < type.numAttributes(); ++i) slots.emplace(type.getAttributeName(i), i);
    }
    auto it = slots.find(name);
    if (it == slots.end()) return std::nullopt;
    return it->second;
  }

  // `forward` on another module is a module call (an enter/exit pair); any other method, or
  // a call on self (torchvision's _forward_impl), runs inline as part of the caller.
  void on_call_method(torch::jit::Node* node, Context& ctx) {
    auto callee = ctx.objects.find(node->input(0));
    if (callee == ctx.objects.end()) return;
    const std::string method = node->s(c10::attr::name);
    const bool is_self = callee->second.get() == ctx.self.get();
    auto module = module_of_.find(callee->second.get());
    const bool is_call = method == "forward" && !is_self && module != module_of_.end();
    if (is_call) {
      ir_.trace.push_back(
          {CallEvent::Kind::kEnter, module->second, -1, ctx.under_if, ctx.under_loop});
    }
    walk_method(callee->second, method, ctx.under_if, ctx.under_loop);
    if (is_call) {
      ir_.trace.push_back(
          {CallEvent::Kind::kExit, module->second, -1, ctx.under_if, ctx.under_loop});
    }
  }

  std::string origin_;
  ModelIR ir_;
  std::unordered_map<const c10::ivalue::Object*, int> module_of_;
  std::unordered_map<const c10::TensorImpl*, int> tensor_of_impl_;
  std::map<std::tuple<const void*, int64_t, std::vector<int64_t>, std::vector<int64_t>>, int>
      tensor_of_view_;
  std::unordered_map<const void*, int> storage_owner_;
  std::unordered_map<const c10::ClassType*, std::unordered_map<std::string, size_t>> slot_index_;
};

// c10 messages carry a backtrace and several lines; the CLI prints one.
std::string first_line(const std::string& text) {
  const auto end = text.find('\n');
  return text.substr(0, end);
}

}  // namespace

ModelIR extract_model(const torch::jit::Module& module, const std::string& origin) {
  return Extractor(origin).run(module);
}

torch::jit::Module load_module(const std::string& path, MappedArchiveStats* stats) {
  {
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) {
      fail(ExitCode::kModel, path +
                                 ": is a directory, not a model file; give the TorchScript file "
                                 "(torch.jit.script(model).save(path)) inside it");
    }
    std::ifstream probe(path, std::ios::binary);
    if (!probe) fail(ExitCode::kModel, path + ": cannot open the model file (does it exist?)");
    if (probe.peek() == std::ifstream::traits_type::eof()) {
      fail(ExitCode::kModel, path +
                                 ": the model file is empty; save it with "
                                 "torch.jit.script(model).save(path)");
    }
  }
  torch::jit::Module module;
  try {
    module = load_mapped_archive(path, stats);
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    const std::string why = first_line(e.what_without_backtrace());
    const bool not_zip = why.find("zip archive") != std::string::npos;
    fail(ExitCode::kModel, path +
                               (not_zip ? ": not a TorchScript archive, or truncated ("
                                        : ": not a TorchScript model (") +
                               why + "); save the model with torch.jit.script(model).save(path)");
  } catch (const std::exception& e) {
    fail(ExitCode::kModel, path + ": cannot load as TorchScript (" + first_line(e.what()) +
                               "); save the model with torch.jit.script(model).save(path)");
  }
  return module;
}

ModelIR load_model(const std::string& path) {
  return extract_model(load_module(path), path);
}

}  // namespace mfsdp::planner
