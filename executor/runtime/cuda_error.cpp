#include "executor/runtime/cuda_error.h"

namespace mfsdp::executor {
namespace {

const char* hint_for(cudaError_t error) {
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return "check the NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES";
    case cudaErrorMemoryAllocation:
      return "the GPU is out of memory; re-plan with a smaller --resident-budget or fewer ranks "
             "per GPU";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
      return "a kernel faulted, and the CUDA context is unusable; the first error on this rank "
             "names the work that ran before it";
    default:
      return nullptr;
  }
}

}  // namespace

std::string cuda_error_text(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + " (" + cudaGetErrorString(error) + ")";
}

ExitCode cuda_exit_code(cudaError_t error) {
  switch (error) {
    case cudaErrorInvalidValue:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
      return ExitCode::kInternal;
    default:
      return ExitCode::kRuntime;
  }
}

std::string cuda_failure_message(cudaError_t error, const std::string& doing) {
  std::string message = doing + " failed: " + cuda_error_text(error);
  if (const char* hint = hint_for(error)) message += std::string("; ") + hint;
  return message;
}

void check_cuda(cudaError_t error, const std::string& doing) {
  if (error != cudaSuccess) fail(cuda_exit_code(error), cuda_failure_message(error, doing));
}

cudaError_t query_event(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) cudaGetLastError();
  return status;
}

}  // namespace mfsdp::executor
