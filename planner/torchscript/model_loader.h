#pragma once
// Loading a TorchScript file into the planner's torch-free ModelIR.

#include <string>

#include "planner/torchscript/model_ir.h"

namespace mfsdp::planner {

// Loads `path` with torch::jit::load on the CPU and extracts the module tree, the distinct
// tensors (tied weights merged by TensorImpl and storage) and the forward call trace.
// Throws Error(kModel) with one line naming the file when it is missing, empty, not a
// TorchScript archive, truncated, or has no forward method.
ModelIR load_model(const std::string& path);

// sha256 of the module tree (paths, types) and every parameter/buffer name, dtype, shape and
// requires_grad: equal for two files exactly when a plan for one fits the other.
std::string structural_hash(const ModelIR& model);

}  // namespace mfsdp::planner
