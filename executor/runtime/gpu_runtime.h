#pragma once
// The context's GPU side (docs/gpu.md): this rank's GPU, its streams (LibTorch's current
// stream for compute, non-blocking ones for the collectives), the NCCL communicators that
// stream_layout() places on them and the plan's slots in GPU memory, all made by create()
// before the first forward. The interface speaks LibTorch and the executor's Stream and
// Communicator, so the context compiles without CUDA headers. Built with the CUDA backend
// only (MFSDP_WITH_CUDA); gpu_availability() is always there.
//
// Ordering, which the context follows: a collective stream waits for an event recorded on
// compute() after the tensors it reads were written (and after its temporaries were
// allocated); compute() waits for the collective's event before it reads the result.

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "executor/comm/communicator.h"
#include "executor/comm/rendezvous.h"
#include "executor/runtime/stream.h"
#include "schema/plan.h"

namespace mfsdp::executor {

// Whether this process can train on a GPU; if not, why not (a short phrase, e.g. "this
// LibTorch is CPU-only") and what would fix it.
struct GpuAvailability {
  bool available = false;
  std::string why_not;
  std::string fix;
};
// For the rank `env` describes: a CUDA LibTorch, a visible GPU, and one for its LOCAL_RANK
// (no more ranks on the host than GPUs).
GpuAvailability gpu_availability(const LaunchEnv& env);

class GpuRuntime {
 public:
  // A collective over all ranks of the rendezvous (device check, NCCL ids). Error(kRuntime)
  // when this process cannot train on a GPU (gpu_availability's reason), when the device
  // choice fails (cuda_device.h) or NCCL cannot connect within `timeout`.
  static std::unique_ptr<GpuRuntime> create(const schema::Plan& plan, const LaunchEnv& env,
                                            Rendezvous& rendezvous,
                                            std::chrono::milliseconds timeout);
  // Waits for the streams' work (each collective still bounded by the timeout), then
  // releases communicators, streams and slots, in that order.
  ~GpuRuntime();
  GpuRuntime(const GpuRuntime&) = delete;
  GpuRuntime& operator=(const GpuRuntime&) = delete;

  at::Device device() const;
  // "cuda:0 (NVIDIA H200, PCI 0000:1B:00.0)".
  std::string describe() const;

  // LibTorch's current stream on the device when create() ran: where the model computes.
  Stream& compute();
  // By stream_layout() name: "all_gather", "reduce_scatter" or "unified", and "control".
  // Error(kInternal) for a stream this plan does not have.
  Stream& stream(const std::string& name);
  // By kind: "all_gather", "reduce_scatter", "replicas" (nullptr without replicas), "control".
  Communicator* communicator(const std::string& kind);

  void* slot(int index) const;  // device memory of the plan's slot `index`
  int64_t slot_bytes() const;   // the one allocation behind all slots

  // Collectives on tensors of this device, in the tensors' dtype (float32, bfloat16,
  // float16), on `comm`'s stream. `comm` must be one of this runtime's communicators.
  void reduce_scatter(Communicator& comm, const at::Tensor& input, const at::Tensor& output,
                      ReduceOp op, std::string what);
  void all_reduce(Communicator& comm, const at::Tensor& data, ReduceOp op, std::string what);

  // Runs `work` with LibTorch's kernels going to `stream` (one of this runtime's).
  void run_on(Stream& stream, const std::function<void()>& work);
  // LibTorch's allocator reuses `tensor`'s memory only after the work issued on `stream` so
  // far: for temporaries that a collective stream reads or writes after the host drops them.
  void record_on(const at::Tensor& tensor, Stream& stream);

  // compute() waits for `event` (a collective's), and the time the device's compute stream
  // stalls there is measured: between timing events recorded just before and after the wait.
  void compute_wait(const std::shared_ptr<Event>& event);
  // Compute's stalls measured so far, in microseconds, over the waits whose events have
  // completed (after a synchronizing call such as loss.item(), all of them).
  int64_t exposed_us();

  // Device bytes held by LibTorch's tensors on this GPU (its caching allocator's count; the
  // slots are outside it): now, and the most since reset_memory_peak().
  int64_t tensor_bytes() const;
  int64_t peak_tensor_bytes() const;
  void reset_memory_peak();

  // Throws the first failure of a collective (Error, naming rank and collective) without
  // waiting for anything; the context calls it at each microbatch's end.
  void check() const;
  // Error(kUsage) when LibTorch's current stream on the device is no longer compute(): the
  // events would then order collectives against the wrong kernels. `where` names the call.
  void check_compute_stream(const std::string& where) const;

 private:
  struct Impl;
  explicit GpuRuntime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mfsdp::executor
