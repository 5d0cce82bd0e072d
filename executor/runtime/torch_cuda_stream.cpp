#include "executor/runtime/torch_cuda_stream.h"

#include "schema/error.h"

#if MFSDP_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mfsdp::executor {

#if MFSDP_TORCH_CUDA

namespace {

c10::cuda::CUDAStream torch_stream(cudaStream_t stream, int device) {
  return c10::cuda::getStreamFromExternal(stream, static_cast<c10::DeviceIndex>(device));
}

}  // namespace

bool torch_cuda_streams_available() {
  return true;
}

cudaStream_t torch_current_stream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

void run_with_torch_stream(cudaStream_t stream, int device, const std::function<void()>& work) {
  const c10::cuda::CUDAStreamGuard guard(torch_stream(stream, device));
  work();
}

void record_tensor_stream(const at::Tensor& tensor, cudaStream_t stream, int device) {
  c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(),
                                                torch_stream(stream, device));
}

TorchCudaMemory torch_cuda_memory(int device) {
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  // StatType::AGGREGATE, first in every LibTorch version (the enum moved namespace in 2.x).
  constexpr size_t aggregate = 0;
  TorchCudaMemory m;
  m.allocated = stats.allocated_bytes[aggregate].current;
  m.peak_allocated = stats.allocated_bytes[aggregate].peak;
  m.reserved = stats.reserved_bytes[aggregate].current;
  m.peak_reserved = stats.reserved_bytes[aggregate].peak;
  return m;
}

void reset_torch_cuda_peak(int device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

#else

namespace {

[[noreturn]] void no_c10_cuda(const char* what) {
  fail(ExitCode::kRuntime, std::string(what) +
                               " needs a CUDA LibTorch, and this mfsdp was built against a "
                               "CPU-only one; build against a CUDA LibTorch, see docs/gpu.md");
}

}  // namespace

bool torch_cuda_streams_available() {
  return false;
}

cudaStream_t torch_current_stream(int) {
  return cudaStreamLegacy;
}

void run_with_torch_stream(cudaStream_t, int, const std::function<void()>&) {
  no_c10_cuda("running LibTorch work on a collective stream");
}

void record_tensor_stream(const at::Tensor&, cudaStream_t, int) {
  no_c10_cuda("recording a tensor's use on a collective stream");
}

TorchCudaMemory torch_cuda_memory(int) {
  return {};
}

void reset_torch_cuda_peak(int) {}

#endif

}  // namespace mfsdp::executor
