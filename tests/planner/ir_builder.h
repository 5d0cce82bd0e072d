#pragma once
// Hand-built ModelIRs for planner tests: a module tree, tensors and a forward trace in a few
// lines, without LibTorch.

#include <string>
#include <vector>

#include "planner/sharded_model.h"
#include "planner/torchscript/model_ir.h"

namespace mfsdp::testing {

class IrBuilder {
 public:
  IrBuilder();  // the model itself: path "", type "Model"
  // Adds a module; its parent is the module at the path's prefix, which must exist.
  IrBuilder& module(const std::string& path, const std::string& type = "Mod");
  // Adds a parameter `name` to module `path`; returns the tensor index.
  int param(const std::string& path, const std::string& name, std::vector<int64_t> shape,
            const std::string& dtype = "float32", bool requires_grad = true);
  int buffer(const std::string& path, const std::string& name, std::vector<int64_t> shape,
             const std::string& dtype = "float32");
  // Registers an existing tensor again, under module `path` (tied weights).
  IrBuilder& tie(int tensor, const std::string& path, const std::string& name);

  // Trace, inside the model's forward.
  IrBuilder& enter(const std::string& path, bool under_if = false, bool under_loop = false);
  IrBuilder& exit(const std::string& path);
  IrBuilder& call(const std::string& path, bool under_if = false, bool under_loop = false);
  IrBuilder& read(int tensor);

  planner::ModelIR build() const;
  planner::ShardedModel model() const;

 private:
  int index(const std::string& path) const;
  planner::ModelIR ir_;
  std::vector<planner::CallEvent> trace_;
};

// Builds a flat model "" > a, b, c, ... each with one float32 parameter "w" of `numel`
// elements, called in the given order. The usual small example of the tests.
planner::ModelIR chain_model(const std::vector<std::string>& children, int64_t numel);

}  // namespace mfsdp::testing
