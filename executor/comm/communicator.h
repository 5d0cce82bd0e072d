#pragma once
// Collectives over one group of ranks, bound to one stream: each call enqueues the collective
// on that stream and returns at once (like NCCL on a cudaStream_t); completion is observed
// through events recorded on the stream. Calls on one communicator must be issued in the same
// order on every rank of its group. Buffers must stay alive until the work has completed.
// Backends: Gloo (gloo_communicator.h) on CPU, NCCL on GPU.

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

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
  // in: size() * count elements of `dtype` (a plan dtype name: "float32", "bfloat16", ...);
  // out: count elements = op over ranks of in[rank() * count, +count). Moves (size()-1)/size()
  // of the input per rank (ring), never an all-reduce plus a slice. A backend that cannot
  // reduce `dtype` throws Error(kUsage) saying so (Gloo reduces float32 only).
  virtual void reduce_scatter(const void* in, void* out, size_t count, const std::string& dtype,
                              ReduceOp op, std::string what) = 0;
  // In place over `count` elements of `dtype`.
  virtual void all_reduce(void* data, size_t count, const std::string& dtype, ReduceOp op,
                          std::string what) = 0;
  // The same over float32.
  void reduce_scatter(const float* in, float* out, size_t count, ReduceOp op, std::string what) {
    reduce_scatter(in, out, count, "float32", op, std::move(what));
  }
  void all_reduce(float* data, size_t count, ReduceOp op, std::string what) {
    all_reduce(data, count, "float32", op, std::move(what));
  }
};

}  // namespace mfsdp::executor
