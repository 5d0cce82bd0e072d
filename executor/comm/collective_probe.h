#pragma once
// Timing the collectives the executor issues, as it issues them (mfsdp probe): all_gather,
// reduce_scatter and all_reduce of float32 over the whole world, each through a Gloo
// communicator bound to its own CPU stream (as cpu_runtime.cpp makes them), each call waited
// for through an event recorded after it, as the compute thread waits. No LibTorch.

#include <chrono>
#include <cstdint>
#include <functional>
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
  // Compute to keep running beside the collectives, as a step's compute runs beside its
  // prefetches and reduce-scatters: a thread calls it over and over while they are timed (on
  // a CPU its cores are the collectives' too). None: the collectives run alone.
  std::function<void()> beside;
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

// How much collectives running beside compute slow it down, on every rank at once: `compute`
// runs alone, then again while this rank's all-gather stream is kept busy with all-gathers
// of `bytes` issued back to back (enough to last 1.5 times the compute alone, as the
// series measured them), three times over. With compute progressing at 1 / (1 + c) of its
// speed while a collective runs, c = overlap / (alone - beside + overlap) - 1, kept within
// [0, 4]; returns this rank's median c. `compute` returns the seconds it took. Every rank
// calls it with the same bytes after probe_collectives; Error(kRuntime) as there.
double probe_contention(Rendezvous& rendezvous, const std::vector<CollectiveSeries>& series,
                        int64_t bytes, const std::function<double()>& compute,
                        std::chrono::milliseconds timeout);

// The median of `values` (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> values);

}  // namespace mfsdp::executor
