#include "executor/runtime/cuda_tensor.h"

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <ATen/ATen.h>

#include "gpu_required.h"
#include "schema/error.h"
#include "text_match.h"

namespace mfsdp::executor {
namespace {

// Debian's LibTorch is CPU-only: views of GPU memory are refused, before the memory is touched.
TEST(DeviceView, CpuOnlyLibTorchRefusesWithAPointerToTheDocs) {
  if (libtorch_has_cuda()) GTEST_SKIP() << "this LibTorch has CUDA; see DeviceViewOnGpu";
  float* nowhere = nullptr;
  try {
    device_view(nowhere, {4}, at::kFloat, 0);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_TRUE(starts_with(e.what(), "this LibTorch has no CUDA"));
    EXPECT_TRUE(contains(e.what(), "build against a CUDA LibTorch, see docs/gpu.md"));
  }
}

TEST(DeviceViewOnGpu, ViewsDeviceMemoryInPlace) {
  if (!libtorch_has_cuda()) GTEST_SKIP() << "this LibTorch has no CUDA";
  MFSDP_REQUIRE_GPU();
  void* memory = nullptr;
  ASSERT_EQ(cudaMalloc(&memory, 6 * sizeof(float)), cudaSuccess);
  {
    at::Tensor view = device_view(memory, {2, 3}, at::kFloat, 0);
    EXPECT_TRUE(view.is_cuda());
    EXPECT_EQ(view.data_ptr(), memory);
    view.fill_(2.5f);
    std::vector<float> host(6);
    ASSERT_EQ(cudaMemcpy(host.data(), memory, sizeof(float) * 6, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(host, std::vector<float>(6, 2.5f));
  }
  cudaFree(memory);
}

}  // namespace
}  // namespace mfsdp::executor
