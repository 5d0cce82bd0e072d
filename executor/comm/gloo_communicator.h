#pragma once
// Collectives over a connected Gloo context, each enqueued on the communicator's stream.
// Rendezvous::gloo_communicator makes them; one context per communicator, so communicators
// on different streams run their collectives concurrently. all_gather and all_reduce are
// Gloo's; reduce_scatter is ring_reduce_scatter.h. Aliasing: all_gather's `in`
// may be this rank's slice of `out`, and reduce_scatter's `out` may lie inside `in`.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "executor/comm/communicator.h"
#include "executor/comm/ring_reduce_scatter.h"

namespace gloo {
class Context;
}

namespace mfsdp::executor {

class GlooCommunicator final : public Communicator {
 public:
  // `global_rank` and `name` only label error messages; `timeout` bounds every collective.
  GlooCommunicator(std::shared_ptr<gloo::Context> context, Stream& stream, std::string name,
                   int global_rank, std::chrono::milliseconds timeout);

  int rank() const override;
  int size() const override;
  Stream& stream() override { return stream_; }
  void set_timeline(Timeline* timeline) override { timeline_ = timeline; }
  const std::string& name() const { return name_; }

  void all_gather(const void* in, void* out, size_t bytes, std::string what) override;
  using Communicator::all_reduce;
  using Communicator::reduce_scatter;
  // float32 only: another dtype is refused (Error(kUsage)) before anything is enqueued.
  void reduce_scatter(const void* in, void* out, size_t count, const std::string& dtype,
                      ReduceOp op, std::string what) override;
  // reduce_scatter over an input in pieces (ring_reduce_scatter.h), adding the result into
  // `out` when `accumulate`: a group's parameter gradients reach the main gradient without
  // a flat copy of the group or a separate output. The pieces must stay alive until the
  // work has completed.
  void reduce_scatter(std::vector<FloatPiece> in, float* out, size_t count, ReduceOp op,
                      bool accumulate, std::string what);
  void all_reduce(void* data, size_t count, const std::string& dtype, ReduceOp op,
                  std::string what) override;

 private:
  // Enqueues `collective` so that any failure surfaces as
  // Error(kRuntime, "rank R: <what> on <name> failed: <reason>").
  // `bytes`: what this rank sends and receives, for the timeline.
  template <typename Collective>
  void enqueue(std::string what, size_t bytes, Collective collective);
  // Error(kUsage) unless `dtype` is float32, the one type Gloo reduces here.
  void check_reducible(const std::string& dtype, const std::string& what) const;

  std::shared_ptr<gloo::Context> context_;  // shared with queued work that still uses it
  Stream& stream_;
  std::string name_;
  int global_rank_;
  std::chrono::milliseconds timeout_;
  Timeline* timeline_ = nullptr;
};

}  // namespace mfsdp::executor
