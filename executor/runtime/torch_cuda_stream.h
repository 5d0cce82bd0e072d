#pragma once
// LibTorch's side of the GPU streams: which stream LibTorch launches the model's kernels on,
// running LibTorch work on one of the runtime's streams, and telling LibTorch's caching
// allocator that a tensor is in use on another stream. All three need c10_cuda, the CUDA
// half of a CUDA LibTorch; the build defines MFSDP_TORCH_CUDA=1 when it links it. Built
// against a CPU-only LibTorch (Debian's), torch_current_stream() answers the legacy default
// stream and the other two refuse, as does make_cuda_runtime before it starts anything.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include <ATen/core/Tensor.h>

namespace mfsdp::executor {

// Whether this build can run LibTorch work on a given stream (it links c10_cuda).
bool torch_cuda_streams_available();

// LibTorch's current stream on `device` for the calling thread; cudaStreamLegacy when this
// build has no c10_cuda (then LibTorch could not run CUDA kernels anyway).
cudaStream_t torch_current_stream(int device);

// Runs `work` with LibTorch's current stream on `device` set to `stream`, restoring the
// previous one afterwards. Error(kRuntime) without c10_cuda.
void run_with_torch_stream(cudaStream_t stream, int device, const std::function<void()>& work);

// The caching allocator reuses `tensor`'s memory only after the work issued on `stream` so
// far has finished (c10's recordStream). Error(kRuntime) without c10_cuda.
void record_tensor_stream(const at::Tensor& tensor, cudaStream_t stream, int device);

// LibTorch's caching allocator on `device`: bytes its tensors hold now, the most since the
// last reset_torch_cuda_peak(), and what it has reserved from the driver (the difference is
// its cache and fragmentation). Zeros without c10_cuda.
struct TorchCudaMemory {
  int64_t allocated = 0, peak_allocated = 0, reserved = 0, peak_reserved = 0;
};
TorchCudaMemory torch_cuda_memory(int device);
void reset_torch_cuda_peak(int device);

}  // namespace mfsdp::executor
