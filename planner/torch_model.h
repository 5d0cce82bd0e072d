#pragma once
// The LibTorch side of model loading, for translation units that already hold a module (the
// executor). Everything else includes planner/model_loader.h, which has no LibTorch types.

#include <torch/script.h>

#include "planner/model_ir.h"

namespace mfsdp::planner {

// Module tree, distinct tensors and forward trace of a loaded module. Throws Error(kModel)
// when it has no forward method or a parameter layout mfsdp cannot shard.
ModelIR extract_model(const torch::jit::Module& module, const std::string& origin);

}  // namespace mfsdp::planner
