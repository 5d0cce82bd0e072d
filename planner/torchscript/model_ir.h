#pragma once
// What the planner knows about a loaded TorchScript model, with no LibTorch types: the module
// tree, the distinct parameter/buffer tensors, and the forward call trace. Passes work on this,
// so tests can build one by hand in a few lines.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace mfsdp::planner {

// A distinct tensor. Tied weights registered under several modules are one TensorInfo.
struct TensorInfo {
  std::vector<std::string> names;  // every FQN it is registered under, in definition order
  std::vector<int64_t> shape;
  std::string dtype;  // schema dtype name, e.g. "float32"
  bool requires_grad = true;
  bool is_parameter = true;  // false: a buffer
  int64_t numel() const;
};

struct ModuleNode {
  std::string path;  // "" for the model itself
  std::string type;  // qualified class name, e.g. "__torch__.model.Block"
  int parent = -1;   // index into ModelIR::modules; -1 for the model
  std::vector<int> children;
  std::vector<int> params;   // TensorInfo indices registered directly on this module
  std::vector<int> buffers;  // same, buffers
};

// The forward trace: entering/leaving a module's `forward` and reading a tensor attribute,
// in graph order. Calls under prim::If/prim::Loop carry the flags of every enclosing block on
// the whole call path (an If inside a callee does not flag the callee itself).
struct CallEvent {
  enum class Kind { kEnter, kExit, kRead };
  Kind kind = Kind::kEnter;
  int module = -1;  // kEnter/kExit: the module instance
  int tensor = -1;  // kRead: the tensor read
  bool under_if = false;
  bool under_loop = false;
};

struct ModelIR {
  std::vector<ModuleNode> modules;  // preorder definition order; modules[0] is the model
  std::vector<TensorInfo> tensors;
  std::vector<CallEvent> trace;  // starts with kEnter of module 0, ends with its kExit

  // Module index of a path ("" or "<root>" for the model); -1 if there is none.
  int find_module(const std::string& path) const;
  // Whether `ancestor` is `module` or contains it.
  bool contains(int ancestor, int module) const;

 private:
  mutable std::unordered_map<std::string, int> path_index_;  // built on first find_module
};

// Printed name of a module path: "" is "<root>".
std::string display_name(const std::string& path);

}  // namespace mfsdp::planner
