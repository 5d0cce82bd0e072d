#pragma once
// Timing the collectives the executor issues, as it issues them (mfsdp probe): all_gather,
// reduce_scatter and all_reduce of float32 over the whole world, each through a Gloo
// communicator bound to its own CPU stream (as cpu_runtime.cpp makes them), each call waited
// for through an event recorded after it, as the compute thread waits. No LibTorch.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp::executor {

class Rendezvous;

// The kinds, in the order they are measured and reported.
const std::vector<std::string>& probed_collectives();

struct CollectiveProbeOptions {
  // Unsharded bytes (all-gather output, reduce-scatter input, all-reduce buffer), ascending.
  std::vector<int64_t> sizes;
  int warmup = 3;                                              // untimed calls per size
  int repeats = 15;                                            // timed calls per size
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // per collective
};

// One collective at one size: the bytes probed and, per timed call, its time on the slowest
// rank (a collective completes when its slowest rank does).
struct CollectiveSample {
  int64_t bytes = 0;
  std::vector<double> us;
};

struct CollectiveSeries {
  std::string kind;
  std::vector<CollectiveSample> samples;  // ascending in bytes
};

// The bytes probed for `bytes` over `world_size` ranks: rounded down to a whole number of
// float32 elements per rank, at least one.
int64_t probe_bytes(int64_t bytes, int world_size);

// Every rank of `rendezvous` calls it with the same options. Returns the same series on every
// rank, one per probed_collectives() kind; sizes that round to the same bytes are probed once.
// Throws Error(kUsage) when the ranks were given other sizes or repeats, Error(kRuntime)
// naming the rank and collective when one fails or times out.
std::vector<CollectiveSeries> probe_collectives(Rendezvous& rendezvous,
                                                const CollectiveProbeOptions& options);

// The median of `values` (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> values);

}  // namespace mfsdp::executor
