#pragma once
// collective_probe.h's backend on a GPU (mfsdp probe --device cuda): this rank's GPU, chosen
// by LOCAL_RANK as for training (cuda_device.h), NCCL communicators each on a non-blocking CUDA
// stream of it, made as cuda_runtime.cpp makes them (one make_nccl_communicators call, one
// communicator per stream), buffers in device memory, and each call timed between CUDA timing
// events recorded around it on its stream. Built with the CUDA backend only; without it
// nccl_probe_absent.cpp refuses.

#include <chrono>
#include <memory>

#include "executor/comm/collective_probe.h"
#include "executor/comm/launch_env.h"

namespace mfsdp::executor {

class Rendezvous;

// A collective over all ranks of the rendezvous (device identities, then one per lanes()
// call). Error(kRuntime) when this rank has no GPU of its own (cuda_device.h's reasons), when
// CUDA fails or NCCL cannot connect within `timeout`, which also bounds every collective.
std::unique_ptr<ProbeBackend> make_nccl_probe_backend(const LaunchEnv& env, Rendezvous& rendezvous,
                                                      std::chrono::milliseconds timeout);

}  // namespace mfsdp::executor
