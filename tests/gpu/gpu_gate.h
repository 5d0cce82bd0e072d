#pragma once
// Holds a CUDA stream at a point until the test opens the gate: a host function enqueued on
// the stream blocks on a future. It makes "not done yet" deterministic without sleeping.

#include <cuda_runtime_api.h>

#include <future>

namespace mfsdp::executor {

class StreamGate {
 public:
  explicit StreamGate(cudaStream_t stream) {
    cudaLaunchHostFunc(
        stream, [](void* gate) { static_cast<std::shared_future<void>*>(gate)->wait(); },
        &opened_future_);
  }
  // Opens the gate if the test has not, so that the stream drains before it is destroyed.
  ~StreamGate() { open(); }
  void open() {
    if (!opened_) opened_promise_.set_value();
    opened_ = true;
  }

 private:
  std::promise<void> opened_promise_;
  std::shared_future<void> opened_future_ = opened_promise_.get_future().share();
  bool opened_ = false;
};

}  // namespace mfsdp::executor
