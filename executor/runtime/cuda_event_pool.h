#pragma once
// CUDA events made up front and reused, so that training creates none once it runs: each
// stream and each NCCL communicator fills a pool when it is created (before the first
// forward) and takes its events from it. A pool grows, by one cudaEventCreate, only when more
// of its events are in use at once than it was made with.

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <vector>

namespace mfsdp::executor {

class CudaEventPool {
 public:
  // `count` events on `device`, without timing unless `timing`. Error(kRuntime), naming
  // `owner` (e.g. "stream 'all_gather'"), when CUDA cannot make them.
  CudaEventPool(int device, int count, std::string owner, bool timing = false);
  // Destroys the events given back; events still taken are lost to their takers.
  ~CudaEventPool();
  CudaEventPool(const CudaEventPool&) = delete;
  CudaEventPool& operator=(const CudaEventPool&) = delete;

  // A spare event, or a new one when none is spare. Thread-safe.
  cudaEvent_t take();
  // Back to the pool. It may still be pending: re-recording it later is safe, since waits
  // issued earlier (cudaStreamWaitEvent) use the recording they saw. Thread-safe.
  void give(cudaEvent_t event);
  // Events made so far, the initial ones included.
  int created() const;

 private:
  cudaEvent_t create();

  const int device_;
  const std::string owner_;
  const bool timing_;
  mutable std::mutex mutex_;
  std::vector<cudaEvent_t> spare_;
  int created_ = 0;
};

}  // namespace mfsdp::executor
