// The built-in profiles (docs/predict.md#built-in-profiles): GPU clusters described from
// published figures, every number derived in that section.
#include <cstdio>
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

// One GPU's datasheet figures (dense, no sparsity): the products' peaks per dtype and HBM
// bandwidth (docs/predict.md#analytic-compute cites each).
struct Gpu {
  const char* name;
  double bf16_tflops, fp32_tflops, memory_gbps;
};
constexpr Gpu kA100{"NVIDIA A100 SXM 80GB", 312, 19.5, 2039};
constexpr Gpu kH100{"NVIDIA H100 SXM", 989.4, 66.9, 3350};
constexpr Gpu kH200{"NVIDIA H200 SXM", 989.4, 66.9, 4800};
constexpr Gpu kB200{"NVIDIA B200 (HGX, 1000 W)", 2250, 80, 8000};

// One set of efficiencies and fixed times for every GPU (docs/predict.md#analytic-compute says
// why each). A fixed time the same on every GPU makes the size at which an operator reaches
// half its peak efficiency grow with the peak, as it does: a faster GPU needs larger products.
ComputeRates rates_of(const Gpu& gpu) {
  ComputeRates r;
  r.tflops = {
      {"bfloat16", gpu.bf16_tflops}, {"float16", gpu.bf16_tflops}, {"float32", gpu.fp32_tflops}};
  r.memory_gbps = gpu.memory_gbps;
  r.matmul = {0.75, 10};
  r.attention = {0.45, 15};
  r.elementwise = {0.8, 3};
  r.embedding = {0.5, 5};
  return r;
}

// 8 GPUs in one node over NVLink / NVSwitch: NCCL's bus bandwidth at 80 % of the link's
// bandwidth each way.
Profile nvlink_node(const std::string& name, const Gpu& gpu, const std::string& link,
                    double link_gbps) {
  Profile p;
  p.name = name;
  const double bus = 0.8 * link_gbps;
  char figures[160];
  std::snprintf(figures, sizeof figures,
                " (%.0f GB/s each way per GPU), NCCL: bus bandwidth %.0f GB/s (80%% of the link), ",
                link_gbps, bus);
  p.description = "8x " + std::string(gpu.name) + " in one node over " + link + figures +
                  "latency 15 us (all-reduce 20 us); compute from the datasheet's dense peaks "
                  "at assumed efficiencies; published figures, not a measurement: calibrate "
                  "with mfsdp probe";
  p.backend = "nccl";
  p.device = gpu.name;
  for (int64_t world : {2, 4, 8}) {
    p.collectives.push_back(ring_collective("all_gather", world, bus, 15));
    p.collectives.push_back(ring_collective("reduce_scatter", world, bus, 15));
    p.collectives.push_back(ring_collective("all_reduce", world, bus, 20));
  }
  p.compute.optimizer_ns_per_element = optimizer_from_bandwidth(gpu.memory_gbps, 0.5);
  p.compute.contention = kNcclContention;
  p.compute.rates = rates_of(gpu);
  return p;
}

// Nodes of 8 H100s over NVLink 4, each GPU with its own 400 Gb/s NDR port on its own rail.
// A ring over the nodes' GPUs (a shard group's all-gather and reduce-scatter) crosses each
// node's boundary once, and NCCL runs 8 such rings over the 8 rails at once: the node's 8
// ports carry it, 320 GB/s of bus bandwidth (80 %), below NVLink's 360. HSDP's replica groups
// have one GPU per node, so their all-reduce crosses the network at every hop, on the one
// port of its rail: 40 GB/s.
Profile infiniband_400() {
  Profile p;
  p.name = "ib-400g";
  p.description =
      "nodes of 8 H100s over NVLink 4, one 400 Gb/s InfiniBand NDR port per GPU on its own "
      "rail (50 GB/s each way): all-gather and reduce-scatter rings over the nodes cross each "
      "node's 8 ports at once, bus bandwidth 320 GB/s (80%); an all-reduce over one GPU per "
      "node (HSDP's replicas) uses one port, 40 GB/s; latency 2 us a hop (30 us at 16 "
      "ranks); published figures, not a measurement: calibrate with mfsdp probe";
  p.backend = "nccl";
  p.device = "NVIDIA H100";
  constexpr double kPort = 0.8 * 50, kRails = 8;
  for (int64_t world : {16, 32, 64}) {
    const double latency = 2.0 * ring::hops(world);  // 2 us a hop: 30 us at 16
    p.collectives.push_back(ring_collective("all_gather", world, kRails * kPort, latency));
    p.collectives.push_back(ring_collective("reduce_scatter", world, kRails * kPort, latency));
    p.collectives.push_back(ring_collective("all_reduce", world, kPort, 2 * latency));
  }
  p.compute.optimizer_ns_per_element = optimizer_from_bandwidth(kH100.memory_gbps, 0.5);
  p.compute.contention = kNcclContention;
  p.compute.rates = rates_of(kH100);
  return p;
}

}  // namespace

std::vector<std::string> builtin_profile_names() {
  return {"a100-nvlink", "h100-nvlink", "h200-nvlink", "b200-nvlink", "ib-400g"};
}

std::string builtin_profile_list() {
  std::string names;
  for (const std::string& n : builtin_profile_names()) names += (names.empty() ? "" : ", ") + n;
  return names;
}

std::optional<Profile> builtin_profile(const std::string& name) {
  if (name == "a100-nvlink") return nvlink_node(name, kA100, "NVLink 3 / NVSwitch", 300);
  if (name == "h100-nvlink") return nvlink_node(name, kH100, "NVLink 4 / NVSwitch", 450);
  if (name == "h200-nvlink") return nvlink_node(name, kH200, "NVLink 4 / NVSwitch", 450);
  if (name == "b200-nvlink") return nvlink_node(name, kB200, "NVLink 5 / NVSwitch", 900);
  if (name == "ib-400g") return infiniband_400();
  return std::nullopt;
}

}  // namespace mfsdp::predict
