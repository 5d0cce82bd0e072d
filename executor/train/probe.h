#pragma once
// `mfsdp probe` on one rank: the collectives the executor issues (comm/collective_probe.h),
// then, on every rank at the same time so that they contend as in training, the reference
// matmul and the optimizers' time per element (planner/torchscript/reference_compute.h).
// Rank 0 turns them into a machine profile (schema/profile.h).

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "executor/comm/launch_env.h"
#include "schema/profile.h"

namespace mfsdp::executor {

struct ProbeConfig {
  std::vector<int64_t> sizes;  // unsharded bytes, ascending, two or more
  int warmup = 3;              // untimed calls per collective and size
  int repeats = 15;            // timed calls per collective and size
  int threads = 0;             // LibTorch intra-op threads; 0 leaves LibTorch's choice
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // rendezvous, each collective
};

// The optimizers whose step is timed, as the profile names them.
const std::vector<std::string>& probed_optimizers();

// Every rank calls it at once. Rank 0 returns the profile: each collective fitted to the
// median over calls of the slowest rank's time per size, the compute figures as the median
// over ranks; every other rank returns std::nullopt. Throws Error(kRuntime) when a rank or a
// collective fails, Error(kUsage) when the sizes give fewer than two points to fit.
std::optional<schema::Profile> probe(const ProbeConfig& config, const LaunchEnv& env);

}  // namespace mfsdp::executor
