#pragma once
// Timing the collectives the executor issues, as it issues them (mfsdp probe): all_gather,
// reduce_scatter and all_reduce of float32 over the whole world, each through a communicator
// bound to its own stream as a runtime binds them (Gloo on a CPU stream, as cpu_runtime.cpp;
// NCCL on a CUDA stream, as cuda_runtime.cpp: comm/nccl_probe.h), each call waited for through
// an event recorded after it, as compute waits. No LibTorch.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "executor/comm/communicator.h"

namespace mfsdp::executor {

class Rendezvous;

// One communicator over every rank, on a stream of its own.
class ProbeLane {
 public:
  virtual ~ProbeLane() = default;
  virtual Communicator& comm() = 0;
  // Runs `issue` (which issues one collective on comm()), waits for an event recorded after it
  // and returns the collective's time in nanoseconds: on a CPU stream from the issue to the
  // wait's end; on a CUDA stream between timing events recorded around it there, so that what
  // is timed is the stream's time on it, not the host's launch and polling.
  virtual int64_t time(const std::function<void()>& issue) = 0;
};

// Where the probe's collectives run: the device's communicators and memory.
class ProbeBackend {
 public:
  virtual ~ProbeBackend() = default;
  virtual const std::string& name() const = 0;  // "gloo" or "nccl", as profiles name backends
  // Where this rank computes, as LibTorch names it ("cpu", "cuda:1"), and as a profile's
  // `device` names it ("cpu", the GPU's name).
  virtual const std::string& compute_device() const = 0;
  virtual const std::string& device_name() const = 0;
  // One lane per name, each over all ranks of the rendezvous; a collective over all of them,
  // called with the same names in the same order on every rank.
  virtual std::vector<std::unique_ptr<ProbeLane>> lanes(const std::vector<std::string>& names) = 0;
  // `count` float32 ones where the lanes' collectives read and write (host or device memory).
  virtual std::shared_ptr<float> ones(size_t count) = 0;
};

// Gloo communicators on CPU streams (cpu_runtime.cpp's binding); `timeout` bounds each
// collective.
std::unique_ptr<ProbeBackend> make_gloo_probe_backend(Rendezvous& rendezvous,
                                                      std::chrono::milliseconds timeout);

// The kinds, in the order they are measured and reported.
const std::vector<std::string>& probed_collectives();

struct CollectiveProbeOptions {
  // Unsharded bytes (all-gather output, reduce-scatter input, all-reduce buffer), ascending.
  std::vector<int64_t> sizes;
  int warmup = 3;    // untimed calls per size
  int repeats = 15;  // timed calls per size
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

// Every rank of `rendezvous` calls it with the same options and a backend of the same kind.
// Returns the same series on every rank, one per probed_collectives() kind; sizes that round
// to the same bytes are probed once. Throws Error(kUsage) when the ranks were given other sizes
// or repeats, Error(kRuntime) naming the rank and collective when one fails or times out.
std::vector<CollectiveSeries> probe_collectives(Rendezvous& rendezvous, ProbeBackend& backend,
                                                const CollectiveProbeOptions& options);

// How much collectives running beside compute slow it down, on every rank at once: `compute`
// runs alone, then again while this rank's all-gather stream is kept busy with all-gathers
// of `bytes` issued back to back (enough to last 1.5 times the compute alone, as the
// series measured them), three times over. With compute progressing at 1 / (1 + c) of its
// speed while a collective runs, c = overlap / (alone - beside + overlap) - 1, kept within
// [0, 4]; returns this rank's median c. `compute` returns the seconds it took (on a GPU, with
// the device synchronised). Every rank calls it with the same bytes after probe_collectives;
// Error(kRuntime) as there.
double probe_contention(Rendezvous& rendezvous, ProbeBackend& backend,
                        const std::vector<CollectiveSeries>& series, int64_t bytes,
                        const std::function<double()>& compute);

// The median of `values` (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> values);

}  // namespace mfsdp::executor
