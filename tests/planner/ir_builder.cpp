#include "tests/planner/ir_builder.h"

#include <stdexcept>

namespace mfsdp::testing {

using planner::CallEvent;

IrBuilder::IrBuilder() {
  planner::ModuleNode root;
  root.type = "Model";
  ir_.modules.push_back(root);
}

int IrBuilder::index(const std::string& path) const {
  for (size_t i = 0; i < ir_.modules.size(); ++i) {
    if (ir_.modules[i].path == path) return static_cast<int>(i);
  }
  throw std::logic_error("IrBuilder: no module " + path);
}

IrBuilder& IrBuilder::module(const std::string& path, const std::string& type) {
  const auto dot = path.rfind('.');
  const int parent = index(dot == std::string::npos ? "" : path.substr(0, dot));
  planner::ModuleNode node;
  node.path = path;
  node.type = type;
  node.parent = parent;
  ir_.modules.push_back(node);
  ir_.modules[parent].children.push_back(static_cast<int>(ir_.modules.size() - 1));
  return *this;
}

int IrBuilder::param(const std::string& path, const std::string& name, std::vector<int64_t> shape,
                     const std::string& dtype, bool requires_grad) {
  planner::TensorInfo t;
  t.names.push_back(path.empty() ? name : path + "." + name);
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.requires_grad = requires_grad;
  ir_.tensors.push_back(t);
  const int tensor = static_cast<int>(ir_.tensors.size() - 1);
  ir_.modules[index(path)].params.push_back(tensor);
  return tensor;
}

int IrBuilder::buffer(const std::string& path, const std::string& name, std::vector<int64_t> shape,
                      const std::string& dtype) {
  planner::TensorInfo t;
  t.names.push_back(path.empty() ? name : path + "." + name);
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.requires_grad = false;
  t.is_parameter = false;
  ir_.tensors.push_back(t);
  const int tensor = static_cast<int>(ir_.tensors.size() - 1);
  ir_.modules[index(path)].buffers.push_back(tensor);
  return tensor;
}

IrBuilder& IrBuilder::tie(int tensor, const std::string& path, const std::string& name) {
  ir_.tensors[tensor].names.push_back(path.empty() ? name : path + "." + name);
  ir_.modules[index(path)].params.push_back(tensor);
  return *this;
}

IrBuilder& IrBuilder::enter(const std::string& path, bool under_if, bool under_loop) {
  trace_.push_back({CallEvent::Kind::kEnter, index(path), -1, under_if, under_loop});
  return *this;
}

IrBuilder& IrBuilder::exit(const std::string& path) {
  trace_.push_back({CallEvent::Kind::kExit, index(path), -1, false, false});
  return *this;
}

IrBuilder& IrBuilder::call(const std::string& path, bool under_if, bool under_loop) {
  return enter(path, under_if, under_loop).exit(path);
}

IrBuilder& IrBuilder::read(int tensor) {
  trace_.push_back({CallEvent::Kind::kRead, -1, tensor, false, false});
  return *this;
}

planner::ModelIR IrBuilder::build() const {
  planner::ModelIR ir = ir_;
  ir.trace.push_back({CallEvent::Kind::kEnter, 0, -1, false, false});
  ir.trace.insert(ir.trace.end(), trace_.begin(), trace_.end());
  ir.trace.push_back({CallEvent::Kind::kExit, 0, -1, false, false});
  return ir;
}

planner::ShardedModel IrBuilder::model() const {
  return planner::ShardedModel(build(), "hand-built.pt", std::string(64, '0'));
}

planner::ModelIR chain_model(const std::vector<std::string>& children, int64_t numel) {
  IrBuilder b;
  for (const auto& c : children) {
    b.module(c);
    b.param(c, "w", {numel});
  }
  for (const auto& c : children) b.call(c);
  return b.build();
}

}  // namespace mfsdp::testing
