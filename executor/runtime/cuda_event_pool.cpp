#include "executor/runtime/cuda_event_pool.h"

#include "executor/runtime/cuda_device.h"
#include "executor/runtime/cuda_error.h"

namespace mfsdp::executor {

CudaEventPool::CudaEventPool(int device, int count, std::string owner, bool timing)
    : device_(device), owner_(std::move(owner)), timing_(timing) {
  spare_.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) spare_.push_back(create());
}

CudaEventPool::~CudaEventPool() {
  for (cudaEvent_t event : spare_) cudaEventDestroy(event);
}

cudaEvent_t CudaEventPool::create() {
  CurrentDevice current(device_);
  cudaEvent_t event = nullptr;
  check_cuda(cudaEventCreateWithFlags(&event, timing_ ? cudaEventDefault : cudaEventDisableTiming),
             "creating an event for " + owner_ + " on GPU " + std::to_string(device_));
  std::lock_guard<std::mutex> lock(mutex_);
  ++created_;
  return event;
}

cudaEvent_t CudaEventPool::take() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!spare_.empty()) {
      cudaEvent_t event = spare_.back();
      spare_.pop_back();
      return event;
    }
  }
  return create();
}

void CudaEventPool::give(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mutex_);
  spare_.push_back(event);
}

int CudaEventPool::created() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return created_;
}

}  // namespace mfsdp::executor
