#pragma once
// The LibTorch side of model loading, for translation units that already hold a module (the
// executor). Everything else includes planner/torchscript/model_loader.h, which has no LibTorch
// types.

#include <torch/script.h>

#include "planner/torchscript/model_ir.h"

namespace mfsdp::planner {

// Schema dtype names ("float32", "bfloat16", ...) and LibTorch scalar types. scalar_type_of
// throws Error(kUsage) for an unknown name; dtype_name_of Error(kModel) for a type mfsdp cannot
// shard (complex, quantized), naming `what`.
c10::ScalarType scalar_type_of(const std::string& dtype);
std::string dtype_name_of(c10::ScalarType type, const std::string& what);

// torch::jit::load on the CPU with the planner's one-line errors: Error(kModel) naming the
// file when it is missing, empty, not a TorchScript archive or truncated. Parameters are not
// read: their storages map the file (planner/torchscript/mapped_archive.h), so a caller reads
// what it uses; `stats` says how many bytes were mapped and how many read.
struct MappedArchiveStats;
torch::jit::Module load_module(const std::string& path, MappedArchiveStats* stats = nullptr);

// Module tree, distinct tensors and forward trace of a loaded module. Throws Error(kModel)
// when it has no forward method or a parameter layout mfsdp cannot shard.
ModelIR extract_model(const torch::jit::Module& module, const std::string& origin);

}  // namespace mfsdp::planner
