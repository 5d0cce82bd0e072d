#pragma once
// `mfsdp probe` on one rank: the collectives the executor issues (comm/collective_probe.h;
// on a GPU over NCCL, comm/nccl_probe.h), then, on every rank at the same time so that they
// contend as in training, the reference matmul and the optimizers' time per element on the
// same device (planner/torchscript/reference_compute.h). Rank 0 turns them into a machine
// profile (predict/profile.h).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "executor/comm/launch_env.h"
#include "predict/profile.h"

namespace mfsdp::executor {

struct ProbeConfig {
  std::vector<int64_t> sizes;  // unsharded bytes, ascending, two or more
  int warmup = 3;              // untimed calls per collective and size
  int repeats = 15;            // timed calls per collective and size
  int threads = 0;             // LibTorch intra-op threads; 0 leaves LibTorch's choice
  // "cpu": Gloo on CPU streams, compute on the CPU; "cuda": NCCL on CUDA streams of the GPU
  // LOCAL_RANK picks (as for training), compute on that GPU.
  std::string device = "cpu";
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // rendezvous, each collective
};

// The optimizers whose step is timed, as the profile names them.
const std::vector<std::string>& probed_optimizers();

// Every rank calls it at once. Rank 0 returns the profile: each collective fitted to the
// mean over calls of the slowest rank's time per size, the compute figures as the median
// over ranks; every other rank returns std::nullopt. Throws Error(kRuntime) when a rank or a
// collective fails, or with device cuda (on every rank) when a rank cannot use a GPU of its
// own; Error(kUsage) for another device or when the ranks were given other sizes.
std::optional<predict::Profile> probe(const ProbeConfig& config, const LaunchEnv& env);

}  // namespace mfsdp::executor
