#include "executor/runtime/cuda_tensor.h"

#include <ATen/Context.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "schema/error.h"

namespace mfsdp::executor {

bool libtorch_has_cuda() {
  return c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA);
}

at::Tensor device_view(void* data, at::IntArrayRef sizes, at::ScalarType dtype, int device) {
  if (!libtorch_has_cuda()) {
    fail(ExitCode::kRuntime,
         "this LibTorch has no CUDA, so it cannot use GPU memory; build against a CUDA "
         "LibTorch, see docs/gpu.md");
  }
  if (!at::hasCUDA()) {
    fail(ExitCode::kRuntime,
         "this LibTorch has CUDA but sees no GPU (GPU " + std::to_string(device) +
             " was selected through the CUDA runtime); check that LibTorch and mfsdp use "
             "compatible CUDA versions, see docs/gpu.md");
  }
  return at::from_blob(
      data, sizes,
      at::TensorOptions().dtype(dtype).device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
}

}  // namespace mfsdp::executor
