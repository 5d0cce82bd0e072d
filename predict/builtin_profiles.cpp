// The built-in profiles (docs/predict.md#built-in-profiles): GPU clusters described from
// published figures, every number derived in that section.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "predict/profile.h"
#include "predict/ring_model.h"
#include "schema/optimizer.h"

namespace mfsdp::predict {
namespace {

constexpr double kGBps = 1e3;  // bytes per µs in a GB/s (10^9 bytes per second)
// NCCL's kernels take a few of the GPU's SMs while they run beside compute: 0.1 (compute at
// 91 % of its speed) is an assumption, not a measurement.
constexpr double kNcclContention = 0.1;

// An NCCL ring over `world` GPUs whose every link carries `bus_gbps` (nccl-tests' "bus
// bandwidth"), with `latency_us` for a small message.
CollectiveProfile ring_collective(const std::string& kind, int64_t world, double bus_gbps,
                                  double latency_us) {
  CollectiveProfile c;
  c.kind = kind;
  c.world_size = world;
  c.cost.latency_us = latency_us;
  const double factor = kind == "all_reduce" ? 2 * ring::share(world) : ring::share(world);
  c.cost.bytes_per_us = bus_gbps * kGBps / factor;
  return c;
}

// The optimizer streams its tensors once per step: ns per element at `efficiency` of the
// memory bandwidth, over the bytes it reads and writes per element (schema/optimizer.h).
std::map<std::string, double> optimizer_from_bandwidth(double memory_gbps, double efficiency) {
  const double bytes_per_ns = memory_gbps * efficiency;
  std::map<std::string, double> ns;
  for (const schema::OptimizerKind& kind : schema::optimizer_kinds()) {
    ns[kind.name] = kind.bytes_per_element / bytes_per_ns;
  }
  return ns;
}

Profile nvlink_node(const std::string& name, const std::string& gpu, double memory_gbps) {
  Profile p;
  p.name = name;
  p.description = "8x " + gpu +
                  " in one node over NVLink 4 / NVSwitch (450 GB/s each way per GPU), NCCL: bus "
                  "bandwidth 360 GB/s (80% of the link), latency 15 us (all-reduce 20 us); "
                  "published figures, not a measurement: calibrate with mfsdp probe";
  p.backend = "nccl";
  p.device = gpu;
  for (int64_t world : {2, 4, 8}) {
    p.collectives.push_back(ring_collective("all_gather", world, 360, 15));
    p.collectives.push_back(ring_collective("reduce_scatter", world, 360, 15));
    p.collectives.push_back(ring_collective("all_reduce", world, 360, 20));
  }
  p.compute.optimizer_ns_per_element = optimizer_from_bandwidth(memory_gbps, 0.5);
  p.compute.contention = kNcclContention;
  return p;
}

Profile infiniband_400() {
  Profile p;
  p.name = "ib-400g";
  p.description =
      "GPUs on several nodes, one 400 Gb/s InfiniBand NDR port per GPU (50 GB/s each way), "
      "NCCL rings whose hops cross the network: bus bandwidth 40 GB/s (80% of the port), "
      "latency 30 us at 16 ranks growing with the hops; published figures, not a "
      "measurement: calibrate with mfsdp probe";
  p.backend = "nccl";
  p.device = "NVIDIA H100";
  for (int64_t world : {16, 32, 64}) {
    const double latency = 2.0 * ring::hops(world);  // 2 us a hop: 30 us at 16
    p.collectives.push_back(ring_collective("all_gather", world, 40, latency));
    p.collectives.push_back(ring_collective("reduce_scatter", world, 40, latency));
    p.collectives.push_back(ring_collective("all_reduce", world, 40, 2 * latency));
  }
  p.compute.optimizer_ns_per_element = optimizer_from_bandwidth(3350, 0.5);
  p.compute.contention = kNcclContention;
  return p;
}

}  // namespace

std::vector<std::string> builtin_profile_names() {
  return {"h100-nvlink", "h200-nvlink", "ib-400g"};
}

std::optional<Profile> builtin_profile(const std::string& name) {
  if (name == "h100-nvlink") return nvlink_node(name, "NVIDIA H100 SXM", 3350);
  if (name == "h200-nvlink") return nvlink_node(name, "NVIDIA H200 SXM", 4800);
  if (name == "ib-400g") return infiniband_400();
  return std::nullopt;
}

}  // namespace mfsdp::predict
