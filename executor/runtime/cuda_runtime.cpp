#include "executor/runtime/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <deque>
#include <exception>
#include <iostream>
#include <map>
#include <thread>
#include <utility>

#include <ATen/ATen.h>

#include "executor/comm/nccl_communicator.h"
#include "executor/runtime/cuda_device.h"
#include "executor/runtime/cuda_error.h"
#include "executor/runtime/cuda_event_pool.h"
#include "executor/runtime/cuda_slots.h"
#include "executor/runtime/cuda_stream.h"
#include "executor/runtime/cuda_tensor.h"
#include "executor/runtime/flat_group.h"
#include "executor/runtime/stream_layout.h"
#include "executor/runtime/torch_cuda_stream.h"
#include "planner/torchscript/torch_model.h"
#include "schema/error.h"

namespace mfsdp::executor {

GpuAvailability gpu_availability(const LaunchEnv& env) {
  if (!libtorch_has_cuda()) {
    return {false, "this LibTorch is CPU-only",
            "build mfsdp against a CUDA LibTorch (docs/gpu.md)"};
  }
  if (!torch_cuda_streams_available()) {
    return {false, "mfsdp was built without LibTorch's c10_cuda",
            "reconfigure against the CUDA LibTorch's CMake prefix (docs/gpu.md)"};
  }
  const DeviceCount visible = query_device_count();
  if (visible.count == 0) {
    return {
        false,
        "no CUDA device is visible (" +
            (visible.error.empty() ? std::string("cudaGetDeviceCount found 0") : visible.error) +
            ")",
        "run on GPU nodes and check nvidia-smi and CUDA_VISIBLE_DEVICES"};
  }
  try {
    choose_device(env, visible);
  } catch (const Error& e) {
    // "rank R: <what is wrong>; <what to do>".
    std::string text = e.what();
    const std::string prefix = "rank " + std::to_string(env.rank) + ": ";
    if (text.rfind(prefix, 0) == 0) text = text.substr(prefix.size());
    const size_t split = text.find("; ");
    return {false, text.substr(0, split),
            split == std::string::npos ? "launch one rank per GPU" : text.substr(split + 2)};
  }
  return {true, "", ""};
}

namespace {

std::string device_name(int device) {
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device) != cudaSuccess) return "unknown GPU";
  return props.name;
}

class CudaRuntime final : public Runtime {
 public:
  CudaRuntime(const schema::Plan& plan, const LaunchEnv& env, Rendezvous& rendezvous,
              std::chrono::milliseconds timeout)
      : rank_(env.rank), layout_(stream_layout(plan.mesh, plan.policy, env.rank)) {
    const CudaDevice device = CudaDevice::select(env, &rendezvous);
    device_ = device.index();
    description_ = "cuda:" + std::to_string(device_) + " (" + device_name(device_) + ", PCI " +
                   device.pci_bus_id() + ")";
    slots_ = std::make_unique<CudaSlots>(plan.memory, plan.policy.align_bytes, device_, env.rank);
    compute_ = std::make_unique<CudaStream>("compute", device_, torch_current_stream(device_));
    timing_events_ =
        std::make_unique<CudaEventPool>(device_, 64, "compute's timing", /*timing=*/true);
    for (const std::string& name : layout_.streams) {
      streams_.emplace(name, make_cuda_stream(name, device_));
    }
    std::vector<NcclCommunicatorSpec> specs;
    for (const CommunicatorPlacement& placement : layout_.communicators) {
      specs.push_back({placement.name, placement.group, streams_.at(placement.stream).get()});
    }
    communicators_ = make_nccl_communicators(rendezvous, specs, timeout);
  }

  // Communicators wait for their collectives, then streams go, then the slots (cudaFree
  // waits for the device).
  ~CudaRuntime() override {
    for (const auto& [before, after] : stalls_) {
      timing_events_->give(before);
      timing_events_->give(after);
    }
    // After any failure (or while one unwinds), every communicator is aborted before any is
    // closed: a closing one would otherwise wait for peers that the failure stopped.
    bool failed = std::uncaught_exceptions() > 0 || compute_->failed();
    for (const auto& [name, s] : streams_) failed = failed || s->failed();
    for (const auto& c : communicators_) failed = failed || c->failed();
    if (failed) {
      for (const auto& c : communicators_) c->abort();
      // cudaFree waits for the whole device, where work queued behind a wedged collective
      // may still sit: the slots are freed only if the device drains within seconds, else
      // left to the process's exit instead of hanging here.
      if (slots_ && !streams_drain_within(kDrainGrace)) {
        const int64_t bytes = slots_->abandon();
        std::cerr << "mfsdp: warning: rank " << rank_ << ": GPU " << device_ << " was still busy "
                  << kDrainGrace.count() << " ms after the failure; its " << bytes
                  << " bytes of slots stay allocated until the process exits\n";
      }
    }
    communicators_.clear();
    streams_.clear();
    compute_.reset();
    slots_.reset();
  }

  at::Device device() const override {
    return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_));
  }
  const std::string& description() const override { return description_; }

  Stream& stream(StreamRole role) override { return *streams_.at(layout_.stream_for(role)); }
  Communicator* communicator(CommRole role) override { return nccl(role); }
  uint8_t* slot(int index) override { return static_cast<uint8_t*>(slots_->data(index)); }
  int64_t slot_bytes() const override { return slots_->layout().total_bytes; }

  // Spans run from issue to when the watchdog sees a collective done (coarse: it polls).
  void set_timeline(Timeline* timeline) override {
    for (CommRole role : {CommRole::kAllGather, CommRole::kReduceScatter, CommRole::kReplicas}) {
      if (NcclCommunicator* comm = nccl(role)) comm->set_timeline(timeline);
    }
  }

  static constexpr std::chrono::milliseconds kDrainGrace{3000};

  // Whether compute and every collective stream finish their work by `limit` from now.
  bool streams_drain_within(std::chrono::milliseconds limit) const {
    std::vector<cudaStream_t> natives{compute_->native()};
    for (const auto& [name, s] : streams_) natives.push_back(s->native());
    const auto deadline = std::chrono::steady_clock::now() + limit;
    CurrentDevice current(device_);
    for (;;) {
      bool idle = true;
      for (cudaStream_t native : natives) {
        if (cudaStreamQuery(native) == cudaErrorNotReady) {
          cudaGetLastError();  // NotReady is no error; clear it (cuda_error.h, query_event)
          idle = false;
        }
      }
      if (idle) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void after_compute(Stream& stream) override { stream.wait_for(compute_->record()); }

  // The compute stream waits, not the host; its stall is measured between timing events
  // recorded just before and after the wait.
  void compute_waits_for(const std::shared_ptr<Event>& event, const std::string&) override {
    if (!event) return;
    // Bounded when nobody asks for exposed_us(): old stalls have long completed.
    if (stalls_.size() >= 256) harvest();
    CurrentDevice current(device_);
    const cudaStream_t stream = compute_->native();
    const cudaEvent_t before = timing_events_->take();
    const cudaEvent_t after = timing_events_->take();
    stalls_.emplace_back(before, after);  // given back by harvest() or the destructor
    const std::string doing = "rank " + std::to_string(rank_) + ": timing a wait of compute";
    check_cuda(cudaEventRecord(before, stream), doing);
    compute_->wait_for(event);
    check_cuda(cudaEventRecord(after, stream), doing);
  }
  int64_t exposed_us() override {
    harvest();
    return stalled_us_;
  }

  // In the reduce dtype: the flat gradient and the output shard are made on compute, the
  // reduce stream waits for them, reduce-scatters and accumulates into the main gradient
  // (float32 under a bf16 or fp16 reduce dtype) with LibTorch's kernels on its own stream, so
  // backward goes on meanwhile. The allocator learns that the temporaries are in use there.
  void reduce_scatter_gradients(FlatGroup& group, const std::vector<at::Tensor>& grads,
                                const std::string& what) override {
    Stream& reduce = stream(StreamRole::kReduce);
    at::Tensor main_grad = group.main_grad();
    const at::TensorOptions options = main_grad.options().dtype(group.reduce_dtype());
    const at::Tensor input = group.flat_gradient(grads, options);
    const at::Tensor output = at::empty({group.layout().shard_numel}, options);
    after_compute(reduce);
    check_on_device(input, what);
    check_on_device(output, what);
    NcclCommunicator& comm = *nccl(CommRole::kReduceScatter);
    if (input.numel() != output.numel() * comm.size()) {
      fail(ExitCode::kInternal, "rank " + std::to_string(rank_) + ": " + what + ": input of " +
                                    std::to_string(input.numel()) + " elements for an output of " +
                                    std::to_string(output.numel()) + " over " +
                                    std::to_string(comm.size()) + " ranks");
    }
    comm.reduce_scatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                        planner::dtype_name_of(input.scalar_type(), what), ReduceOp::kAvg, what);
    const cudaStream_t native = cuda(reduce).native();
    record_tensor_stream(input, native, device_);
    record_tensor_stream(output, native, device_);
    delay_stream_for_debugging(native);  // the race amplifier; nothing unless asked for
    run_with_torch_stream(native, device_, [&] { main_grad.add_(output); });
  }

  void all_reduce(CommRole role, const at::Tensor& data, ReduceOp op,
                  const std::string& what) override {
    check_on_device(data, what);
    NcclCommunicator* comm = nccl(role);
    if (!comm) fail(ExitCode::kInternal, what + ": this plan has no communicator for it");
    comm->all_reduce(data.data_ptr(), static_cast<size_t>(data.numel()),
                     planner::dtype_name_of(data.scalar_type(), what), op, what);
  }

  // A tensor on the device for NCCL; compute waits for the control stream, and the host for
  // compute when it reads the value.
  double all_reduce_scalar(double value, ReduceOp op, const std::string& what) override {
    const at::Tensor t =
        at::full({1}, value, at::TensorOptions().dtype(at::kFloat).device(device()));
    Stream& control = stream(StreamRole::kControl);
    after_compute(control);
    all_reduce(CommRole::kControl, t, op, what);
    compute_->wait_for(control.record());
    const double result = t.item<double>();
    check();  // a collective that failed or timed out leaves `t` meaningless
    return result;
  }

  int64_t tensor_bytes() const override { return torch_cuda_memory(device_).allocated; }
  int64_t peak_tensor_bytes() const override { return torch_cuda_memory(device_).peak_allocated; }
  int64_t cached_at_peak_bytes() const override { return 0; }
  void reset_memory_peak() override { reset_torch_cuda_peak(device_); }

  void check() override {
    // An event recorded on a failed stream throws its failure at once.
    for (const auto& [name, s] : streams_) {
      if (s->failed()) s->record()->wait();
    }
    if (compute_->failed()) compute_->record()->wait();
  }

  void check_compute_stream(const std::string& where) override {
    if (torch_current_stream(device_) == compute_->native()) return;
    fail(ExitCode::kUsage, "rank " + std::to_string(rank_) + ": " + where +
                               " runs on another CUDA stream than the one that was current when "
                               "the context was created; create the context on the stream you "
                               "train on, and do not switch streams around its calls");
  }

 private:
  NcclCommunicator* nccl(CommRole role) const {
    const int index = layout_.communicator_for(role);
    return index < 0 ? nullptr : communicators_[index].get();
  }

  CudaStream& cuda(Stream& stream) const {
    if (&stream == compute_.get()) return *compute_;
    for (const auto& [name, s] : streams_) {
      if (s.get() == &stream) return *s;
    }
    fail(ExitCode::kInternal, "rank " + std::to_string(rank_) + ": stream '" + stream.name() +
                                  "' is not one of the GPU runtime's streams");
  }

  void check_on_device(const at::Tensor& t, const std::string& what) const {
    if (!t.is_cuda() || t.get_device() != device_ || !t.is_contiguous()) {
      fail(ExitCode::kInternal, "rank " + std::to_string(rank_) + ": " + what +
                                    " needs a contiguous tensor on cuda:" +
                                    std::to_string(device_) + ", got one on " + t.device().str());
    }
  }

  // Adds the stalls whose end has completed, in order.
  void harvest() {
    while (!stalls_.empty()) {
      const auto [before, after] = stalls_.front();
      // Stream order: when this one has not completed, the later ones have not either.
      if (query_event(after) != cudaSuccess) return;
      float ms = 0;
      check_cuda(cudaEventElapsedTime(&ms, before, after),
                 "rank " + std::to_string(rank_) + ": timing a wait of compute");
      stalled_us_ += static_cast<int64_t>(ms * 1000.0f);
      timing_events_->give(before);
      timing_events_->give(after);
      stalls_.pop_front();
    }
  }

  int rank_ = 0;
  int device_ = 0;
  std::string description_;
  StreamLayout layout_;
  // Destroyed explicitly, in the destructor's order.
  std::unique_ptr<CudaSlots> slots_;
  std::unique_ptr<CudaStream> compute_;
  std::map<std::string, std::unique_ptr<CudaStream>> streams_;
  std::vector<std::unique_ptr<NcclCommunicator>> communicators_;
  // Exposed communication: timing events around compute's waits, until they complete.
  std::unique_ptr<CudaEventPool> timing_events_;
  std::deque<std::pair<cudaEvent_t, cudaEvent_t>> stalls_;
  int64_t stalled_us_ = 0;
};

}  // namespace

std::unique_ptr<Runtime> make_cuda_runtime(const schema::Plan& plan, const LaunchEnv& env,
                                           Rendezvous& rendezvous,
                                           std::chrono::milliseconds timeout) {
  const GpuAvailability availability = gpu_availability(env);
  if (!availability.available) {
    fail(ExitCode::kRuntime, "rank " + std::to_string(env.rank) + ": cannot train on a GPU: " +
                                 availability.why_not + "; " + availability.fix);
  }
  return std::make_unique<CudaRuntime>(plan, env, rendezvous, timeout);
}

}  // namespace mfsdp::executor
