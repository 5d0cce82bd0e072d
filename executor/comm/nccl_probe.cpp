#include "executor/comm/nccl_probe.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "executor/comm/nccl_communicator.h"
#include "executor/comm/rendezvous.h"
#include "executor/runtime/cuda_device.h"
#include "executor/runtime/cuda_error.h"
#include "executor/runtime/cuda_event_pool.h"
#include "executor/runtime/cuda_stream.h"

namespace mfsdp::executor {
namespace {

// An NCCL communicator on its stream, and two timing events for the call being timed. The
// communicator goes first (it waits for, or aborts, its collectives), then the stream, then
// the events' pool.
class NcclLane final : public ProbeLane {
 public:
  NcclLane(std::unique_ptr<CudaStream> stream, std::unique_ptr<NcclCommunicator> comm, int rank)
      : timing_(stream->device(), 2, "probe stream '" + stream->name() + "'", /*timing=*/true),
        stream_(std::move(stream)),
        comm_(std::move(comm)),
        rank_(rank),
        before_(timing_.take()),
        after_(timing_.take()) {}
  ~NcclLane() override {
    timing_.give(before_);
    timing_.give(after_);
  }

  Communicator& comm() override { return *comm_; }

  int64_t time(const std::function<void()>& issue) override {
    CurrentDevice current(stream_->device());
    const std::string doing = "rank " + std::to_string(rank_) + ": timing a collective on " +
                              comm_->name() + " for mfsdp probe";
    check_cuda(cudaEventRecord(before_, stream_->native()), doing);
    issue();
    check_cuda(cudaEventRecord(after_, stream_->native()), doing);
    // As compute waits for a collective: an event recorded after it, which also rethrows a
    // failure or timeout the communicator's watchdog reported.
    comm_->stream().record()->wait();
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, before_, after_), doing);
    return static_cast<int64_t>(static_cast<double>(ms) * 1e6);
  }

 private:
  CudaEventPool timing_;
  std::unique_ptr<CudaStream> stream_;
  std::unique_ptr<NcclCommunicator> comm_;
  int rank_;
  cudaEvent_t before_;
  cudaEvent_t after_;
};

std::string gpu_name(int device) {
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device) != cudaSuccess) return "unknown GPU";
  return props.name;
}

class NcclProbeBackend final : public ProbeBackend {
 public:
  NcclProbeBackend(const LaunchEnv& env, Rendezvous& rendezvous, std::chrono::milliseconds timeout)
      : rendezvous_(rendezvous), timeout_(timeout), rank_(env.rank) {
    const CudaDevice device = CudaDevice::select(env, &rendezvous);
    device_ = device.index();
    compute_device_ = "cuda:" + std::to_string(device_);
    device_name_ = gpu_name(device_);
  }

  const std::string& name() const override { return name_; }
  const std::string& compute_device() const override { return compute_device_; }
  const std::string& device_name() const override { return device_name_; }

  std::vector<std::unique_ptr<ProbeLane>> lanes(const std::vector<std::string>& names) override {
    std::vector<int> group(rendezvous_.world_size());
    std::iota(group.begin(), group.end(), 0);
    std::vector<std::unique_ptr<CudaStream>> streams;
    std::vector<NcclCommunicatorSpec> specs;
    for (const std::string& name : names) {
      streams.push_back(make_cuda_stream("probe " + name, device_));
      specs.push_back({"probe/" + name, group, streams.back().get()});
    }
    std::vector<std::unique_ptr<NcclCommunicator>> comms =
        make_nccl_communicators(rendezvous_, specs, timeout_);
    std::vector<std::unique_ptr<ProbeLane>> made;
    for (size_t i = 0; i < names.size(); ++i) {
      made.push_back(std::make_unique<NcclLane>(std::move(streams[i]), std::move(comms[i]), rank_));
    }
    return made;
  }

  std::shared_ptr<float> ones(size_t count) override {
    CurrentDevice current(device_);
    const size_t bytes = std::max<size_t>(count, 1) * sizeof(float);
    const std::string doing = "rank " + std::to_string(rank_) + ": allocating " +
                              std::to_string(bytes) + " bytes for mfsdp probe on GPU " +
                              std::to_string(device_) + " (cudaMalloc)";
    void* memory = nullptr;
    check_cuda(cudaMalloc(&memory, bytes), doing);
    std::shared_ptr<float> data(static_cast<float*>(memory), [](float* p) { cudaFree(p); });
    const std::vector<float> host(count, 1.0f);
    check_cuda(cudaMemcpy(memory, host.data(), count * sizeof(float), cudaMemcpyHostToDevice),
               "rank " + std::to_string(rank_) + ": filling mfsdp probe's buffers on GPU " +
                   std::to_string(device_));
    return data;
  }

 private:
  const std::string name_ = "nccl";
  Rendezvous& rendezvous_;
  std::chrono::milliseconds timeout_;
  int rank_;
  int device_ = 0;
  std::string compute_device_;
  std::string device_name_;
};

}  // namespace

std::unique_ptr<ProbeBackend> make_nccl_probe_backend(const LaunchEnv& env, Rendezvous& rendezvous,
                                                      std::chrono::milliseconds timeout) {
  return std::make_unique<NcclProbeBackend>(env, rendezvous, timeout);
}

}  // namespace mfsdp::executor
