#include "executor/runtime/cuda_device.h"

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include "gpu_required.h"
#include "schema/error.h"
#include "text_match.h"

namespace mfsdp::executor {
namespace {

LaunchEnv local(int rank, int local_rank, int local_world_size) {
  LaunchEnv env;
  env.rank = rank;
  env.world_size = 16;
  env.local_rank = local_rank;
  env.local_world_size = local_world_size;
  return env;
}

std::string refusal(const LaunchEnv& env, const DeviceCount& visible) {
  try {
    const int device = choose_device(env, visible);
    return "chose device " + std::to_string(device);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    return e.what();
  }
}

TEST(DeviceChoice, LocalRankPicksTheDevice) {
  EXPECT_EQ(choose_device(local(0, 0, 1), {1, ""}), 0);
  EXPECT_EQ(choose_device(local(6, 2, 4), {4, ""}), 2);
  EXPECT_EQ(choose_device(local(6, 2, 4), {8, ""}), 2);  // fewer ranks than GPUs
}

TEST(DeviceChoice, NoDeviceNamesTheRankAndCudasReason) {
  EXPECT_TRUE(starts_with(refusal(local(3, 3, 4), {0, "cudaErrorNoDevice (no device)"}),
                          "rank 3: no CUDA device is visible (cudaGetDeviceCount failed: "
                          "cudaErrorNoDevice (no device)); run on a GPU node"));
  EXPECT_TRUE(starts_with(refusal(local(3, 3, 4), {0, ""}),
                          "rank 3: no CUDA device is visible (cudaGetDeviceCount found 0)"));
}

TEST(DeviceChoice, MoreLocalRanksThanDevicesFailsOnEveryLocalRank) {
  for (int local_rank : {0, 3, 7}) {
    const std::string message = refusal(local(8 + local_rank, local_rank, 8), {4, ""});
    EXPECT_TRUE(starts_with(message, "rank " + std::to_string(8 + local_rank) +
                                         ": LOCAL_WORLD_SIZE=8 ranks on this host share 4 CUDA "
                                         "device(s); launch at most one rank per GPU"));
  }
}

TEST(DeviceChoice, LocalRankBeyondTheDevicesIsRefused) {
  EXPECT_TRUE(starts_with(refusal(local(5, 5, 4), {4, ""}),
                          "rank 5: LOCAL_RANK=5 has no GPU: this process sees 4 CUDA device(s) "
                          "(0..3); "));
}

TEST(DeviceChoice, TwoRanksOnOneGpuAreNamed) {
  EXPECT_NO_THROW(
      check_devices_distinct({"a\t0000:1B:00.0", "a\t0000:1C:00.0", "b\t0000:1B:00.0"}, 0));
  try {
    check_devices_distinct({"a\t0000:1B:00.0", "a\t0000:1C:00.0", "a\t0000:1B:00.0"}, 1);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_TRUE(starts_with(e.what(),
                            "rank 1: ranks 0 and 2 both use the GPU at PCI 0000:1B:00.0 on host "
                            "a; launch at most one rank per GPU"));
  }
}

TEST(CudaDeviceOnGpu, SelectsLocalRankAndMakesItCurrent) {
  MFSDP_REQUIRE_GPU();
  const CudaDevice device = CudaDevice::select(local(0, 0, 1), nullptr);
  EXPECT_EQ(device.index(), 0);
  EXPECT_FALSE(device.pci_bus_id().empty());
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
  EXPECT_EQ(device_identity(0).substr(device_identity(0).find('\t') + 1), device.pci_bus_id());
}

}  // namespace
}  // namespace mfsdp::executor
