#pragma once
// CUDA runtime errors as mfsdp::Error: the error's name and text, what was being done, and a
// hint where one helps. Torch-free, so the GPU backend's logic tests run without LibTorch.

#include <cuda_runtime_api.h>

#include <string>

#include "schema/error.h"

namespace mfsdp::executor {

// "cudaErrorNoDevice (no CUDA-capable device is detected)".
std::string cuda_error_text(cudaError_t error);

// kInternal for errors that mean mfsdp passed a bad argument or handle; kRuntime otherwise
// (no device, out of memory, a kernel fault, the driver).
ExitCode cuda_exit_code(cudaError_t error);

// "<doing> failed: <cuda_error_text>[; <hint>]", e.g. doing = "rank 3: allocating 4.0 GiB of
// slots on GPU 0 (cudaMalloc)".
std::string cuda_failure_message(cudaError_t error, const std::string& doing);

// Throws Error(cuda_exit_code, cuda_failure_message) unless `error` is cudaSuccess.
void check_cuda(cudaError_t error, const std::string& doing);

// cudaEventQuery, and when it says cudaErrorNotReady, that status cleared from the thread's
// "last error" (as LibTorch's own queries do): otherwise a later cudaGetLastError, such as a
// launch check, reports a stale "device not ready". Every event poll in mfsdp goes through it.
cudaError_t query_event(cudaEvent_t event);

}  // namespace mfsdp::executor
