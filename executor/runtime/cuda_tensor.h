#pragma once
// LibTorch views of GPU memory the runtime owns (the slots), so that units compute on their
// gathered parameters in place. Debian's LibTorch is CPU-only: there every view is refused
// with an error that says so, rather than a tensor that fails later.

#include <ATen/core/Tensor.h>

namespace mfsdp::executor {

// Whether this process's LibTorch has CUDA built in (its CUDA device guard is registered).
bool libtorch_has_cuda();

// A non-owning tensor of `sizes` and `dtype` over the device memory at `data` on GPU
// `device`. Throws Error(kRuntime) when LibTorch has no CUDA ("this LibTorch has no CUDA;
// build against a CUDA LibTorch, see docs/gpu.md") or sees no GPU.
at::Tensor device_view(void* data, at::IntArrayRef sizes, at::ScalarType dtype, int device);

}  // namespace mfsdp::executor
