// mfsdp probe on GPUs (executor/train/probe.h, device cuda): NCCL lanes timed on their own
// streams, compute timed on the GPU. One rank runs on any GPU machine; the two-rank test needs
// two GPUs and skips otherwise (it is not an *OnGpu* test, which gpu-check requires to run).
#include "executor/train/probe.h"

#include <gtest/gtest.h>

#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "executor/comm/rendezvous.h"
#include "executor/runtime/cuda_device.h"
#include "gpu_required.h"
#include "tests/executor/runtime/one_rank_world.h"
#include "tests/predict/profile_expectations.h"

namespace mfsdp::executor {
namespace {

using namespace std::chrono_literals;

ProbeConfig small_gpu_probe() {
  ProbeConfig config;
  config.sizes = {4096, 65536};
  config.repeats = 3;
  config.device = "cuda";
  config.timeout = 60s;
  return config;
}

void expect_gpu_profile(const predict::Profile& profile, int world) {
  EXPECT_EQ(profile.name, "probe");
  EXPECT_EQ(profile.backend, "nccl");
  EXPECT_NE(profile.device, "cpu");
  EXPECT_FALSE(profile.device.empty());
  EXPECT_FALSE(profile.threads_per_rank.has_value());
  EXPECT_NE(profile.description.find(", nccl on " + profile.device + " GPUs (one per rank), "),
            std::string::npos)
      << profile.description;
  testing::expect_probed_collectives_and_compute(profile, world, {4096, 65536});
}

TEST(NcclProbeOnGpu, OneRankTimesEachCollectiveOnItsStreamAndComputesOnTheGpu) {
  MFSDP_REQUIRE_GPU();
  OneRankWorld world;
  const std::optional<predict::Profile> profile = probe(small_gpu_probe(), world.env);
  ASSERT_TRUE(profile.has_value());
  expect_gpu_profile(*profile, 1);
}

// Two ranks in this process, one thread and one GPU each, as LOCAL_RANK 0 and 1 of a node.
TEST(NcclProbeOnTwoGpus, TwoRanksWriteOneProfileOfTheirCollectives) {
  MFSDP_REQUIRE_GPU();
  const DeviceCount visible = query_device_count();
  if (visible.count < 2) {
    GTEST_SKIP() << "needs two GPUs; this machine has " << visible.count;
  }
  StoreHost host(0);
  std::vector<std::optional<predict::Profile>> profiles(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      LaunchEnv env;
      env.master_port = host.port();
      env.rank = rank;
      env.world_size = 2;
      env.local_rank = rank;
      env.local_world_size = 2;
      env.agent_store = true;
      env.secret = host.secret();
      try {
        profiles[rank] = probe(small_gpu_probe(), env);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (std::thread& rank : ranks) rank.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  ASSERT_TRUE(profiles[0].has_value());
  EXPECT_FALSE(profiles[1].has_value()) << "only rank 0 returns the profile";
  expect_gpu_profile(*profiles[0], 2);
  EXPECT_NE(profiles[0]->description.find("measured by mfsdp probe: 2 ranks on "),
            std::string::npos)
      << profiles[0]->description;
}

}  // namespace
}  // namespace mfsdp::executor
