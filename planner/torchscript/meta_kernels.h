#pragma once
// Meta kernels for the operators a traced step of a transformer or convnet runs that this
// LibTorch has none for (`mfsdp plan --trace-device meta`, docs/plan-format.md#trace).
// Python's torch registers its meta kernels from Python; a C++ process without Python lacks
// those. No LibTorch types here.

#include <string>
#include <vector>

namespace mfsdp::planner {

// Registers a Meta kernel for each operator of the list below that has none here (so on a
// LibTorch that has its own, nothing is registered); idempotent. Returns the operators it
// registered, as "aten::name".
std::vector<std::string> register_missing_meta_kernels();

}  // namespace mfsdp::planner
