#pragma once
// runtime.h on a GPU (docs/gpu.md): this rank's GPU, LibTorch's current stream there as
// compute, non-blocking CUDA streams for the collectives with NCCL communicators on them
// (stream_layout() order), and the plan's slots in one device allocation, all made before the
// first forward. Compiled with the CUDA backend only (MFSDP_WITH_CUDA); without it
// cuda_runtime_absent.cpp says why these cannot be used.
//
// Ordering: a collective stream waits for an event recorded on compute after the tensors it
// reads were written (and after its temporaries were allocated); compute waits for the
// collective's event before it reads the result, between two timing events that measure its
// stall (exposed communication).

#include <chrono>
#include <memory>
#include <string>

#include "executor/runtime/runtime.h"

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

// A collective over all ranks of the rendezvous (device check, NCCL ids). Error(kRuntime)
// when this process cannot train on a GPU (gpu_availability's reason), when the device
// choice fails (cuda_device.h) or NCCL cannot connect within `timeout`, which also bounds
// every collective. The runtime's destructor waits for the streams' work, then releases
// communicators, streams and slots, in that order.
std::unique_ptr<Runtime> make_cuda_runtime(const schema::Plan& plan, const LaunchEnv& env,
                                           Rendezvous& rendezvous,
                                           std::chrono::milliseconds timeout);

}  // namespace mfsdp::executor
