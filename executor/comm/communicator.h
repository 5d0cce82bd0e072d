#pragma once
// Collectives over one group of ranks, bound to one stream: each call enqueues the collective
// on that stream and returns at once (like NCCL on a cudaStream_t); completion is observed
// through events recorded on the stream. Calls on one communicator must be issued in the same
// order on every rank of its group. Buffers must stay alive until the work has completed.
// Backends: Gloo (gloo_communicator.h) on CPU, NCCL on GPU.

#include <cstddef>
#include <memory>
#include <string>

#include "executor/runtime/stream.h"

namespace mfsdp::executor {

enum class ReduceOp { kSum, kAvg };

class Timeline;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  // within the group
  virtual int size() const = 0;
  virtual Stream& stream() = 0;
  // Records each collective from now on as a span on the stream's track (nullptr: stop).
  virtual void set_timeline(Timeline* timeline) = 0;

  // out[r * bytes, (r+1) * bytes) = rank r's `in` (bytes each). Dtype-agnostic.
  virtual void all_gather(const void* in, void* out, size_t bytes, std::string what) = 0;
  // in: size() * count floats; out: count floats = op over ranks of in[rank() * count, +count).
  // Moves (size()-1)/size() of the input per rank (ring), never an all-reduce plus a slice.
  virtual void reduce_scatter(const float* in, float* out, size_t count, ReduceOp op,
                              std::string what) = 0;
  // In place over `count` floats.
  virtual void all_reduce(float* data, size_t count, ReduceOp op, std::string what) = 0;
  // Copies `bytes` from rank `root`'s `data` into every other rank's `data`.
  virtual void broadcast(void* data, size_t bytes, int root, std::string what) = 0;
};

}  // namespace mfsdp::executor
