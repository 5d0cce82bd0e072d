#pragma once
// Collectives over NCCL on a CudaStream: communicator.h's contract on GPU. Buffers are device
// memory on the stream's device. Each communicator owns one ncclComm_t, connected in its
// constructor (nothing lazy in a training step), and one watchdog thread that polls
// ncclCommGetAsyncError and the in-flight collectives' events: a collective that fails, or
// does not finish within the timeout, fails the stream with a message naming rank, collective
// and communicator, and the communicator is aborted (ncclCommAbort) so that nothing hangs.
// After that every call throws the first error.
//
// One communicator per stream, never one shared by two streams: NCCL runs the collectives of
// one communicator in issue order, so all-gathers and reduce-scatters on one communicator
// could not overlap, and issuing them from two streams could deadlock across ranks.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "executor/comm/communicator.h"
#include "executor/comm/rendezvous.h"
#include "executor/runtime/cuda_stream.h"

namespace mfsdp::executor {

class NcclCommunicator final : public Communicator {
 public:
  // Joins the NCCL communicator that `unique_id` (encode_unique_id's text) names, as
  // `group_rank` of `group_size`, on the stream's device. Returns once all members have
  // joined; throws Error(kRuntime) when NCCL fails or `timeout` passes first. `timeout` also
  // bounds every collective. `name` and `global_rank` label error messages.
  NcclCommunicator(const std::string& unique_id, int group_rank, int group_size, CudaStream& stream,
                   std::string name, int global_rank, std::chrono::milliseconds timeout);
  // Waits up to 10 s (or the timeout, if shorter) for the collectives in flight, then
  // releases the communicator (ncclCommFinalize, bounded alike; ncclCommDestroy), or aborts it
  // if that fails. Aborts at once, waiting for no peer, while an exception unwinds or when a
  // collective has failed.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  Stream& stream() override;
  CudaStream& cuda_stream();
  // Spans run from issue to when the watchdog sees the collective done (coarse: it polls).
  void set_timeline(Timeline* timeline) override;
  const std::string& name() const;

  // All-gather in place when `in` is this rank's slice of `out`.
  void all_gather(const void* in, void* out, size_t bytes, std::string what) override;
  using Communicator::all_reduce;
  using Communicator::reduce_scatter;
  // In place when `out` is in + rank() * count; otherwise `out` must not overlap `in`.
  // `dtype` is mapped by nccl_dtype(). kAvg is NCCL's own average (ncclAvg), kSum a plain sum.
  void reduce_scatter(const void* in, void* out, size_t count, const std::string& dtype,
                      ReduceOp op, std::string what) override;
  void all_reduce(void* data, size_t count, const std::string& dtype, ReduceOp op,
                  std::string what) override;

  // Whether a collective failed or timed out (the communicator is then aborted).
  bool failed() const;
  // Aborts the communicator now (ncclCommAbort) as failed: kernels in flight end, no peer is
  // awaited, and waits on its stream and later calls throw. For shutting down after a
  // failure elsewhere (another communicator, the compute stream).
  void abort();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct NcclCommunicatorSpec {
  std::string name;              // unique per group and equal on its members; no '=' or ';'
  std::vector<int> group;        // global ranks, ascending, containing this rank
  CudaStream* stream = nullptr;  // where its collectives run
};

// Creates this rank's NCCL communicators, in the order given. Each group's first rank makes
// the group's ncclUniqueId, and one exchange through the rendezvous store hands every id to
// every rank: so this is a collective over all ranks of the rendezvous (not only the groups),
// called once by each rank with its own specs. Ranks that share several communicators must
// list them in the same order. Invalid groups, reused names and missing ids are
// Error(kInternal).
std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(
    Rendezvous& rendezvous, const std::vector<NcclCommunicatorSpec>& specs,
    std::chrono::milliseconds timeout);

}  // namespace mfsdp::executor
