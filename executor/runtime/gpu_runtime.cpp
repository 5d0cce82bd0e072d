#include "executor/runtime/gpu_runtime.h"

#include <cuda_runtime_api.h>

#include <deque>
#include <map>

#include "executor/comm/nccl_communicator.h"
#include "executor/runtime/cuda_device.h"
#include "executor/runtime/cuda_error.h"
#include "executor/runtime/cuda_event_pool.h"
#include "executor/runtime/cuda_slots.h"
#include "executor/runtime/cuda_stream.h"
#include "executor/runtime/cuda_tensor.h"
#include "executor/runtime/stream_layout.h"
#include "executor/runtime/torch_cuda_stream.h"
#include "planner/torch_model.h"
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

struct GpuRuntime::Impl {
  int rank = 0;
  int device = 0;
  std::string description;
  // Destroyed in reverse: communicators (they wait for their collectives), then streams,
  // then the slots (cudaFree waits for the device).
  std::unique_ptr<CudaSlots> slots;
  std::unique_ptr<CudaStream> compute;
  std::map<std::string, std::unique_ptr<CudaStream>> streams;
  std::vector<std::unique_ptr<NcclCommunicator>> communicators;
  std::map<std::string, NcclCommunicator*> by_kind;
  // Exposed communication: timing events around compute's waits, until they complete.
  std::unique_ptr<CudaEventPool> timing_events;
  std::deque<std::pair<cudaEvent_t, cudaEvent_t>> stalls;
  int64_t stalled_us = 0;

  // Adds the stalls whose end has completed, in order.
  void harvest() {
    while (!stalls.empty()) {
      const auto [before, after] = stalls.front();
      // Stream order: when this one has not completed, the later ones have not either.
      if (cudaEventQuery(after) != cudaSuccess) return;
      float ms = 0;
      check_cuda(cudaEventElapsedTime(&ms, before, after),
                 "rank " + std::to_string(rank) + ": timing a wait of compute");
      stalled_us += static_cast<int64_t>(ms * 1000.0f);
      timing_events->give(before);
      timing_events->give(after);
      stalls.pop_front();
    }
  }

  ~Impl() {
    for (const auto& [before, after] : stalls) {
      timing_events->give(before);
      timing_events->give(after);
    }
    communicators.clear();
    streams.clear();
    compute.reset();
    slots.reset();
  }

  NcclCommunicator& nccl(Communicator& comm) const {
    for (const auto& c : communicators) {
      if (c.get() == &comm) return *c;
    }
    fail(ExitCode::kInternal, "rank " + std::to_string(rank) +
                                  ": a collective was issued on a communicator the GPU "
                                  "runtime does not own");
  }

  CudaStream& cuda(Stream& stream) const {
    if (&stream == compute.get()) return *compute;
    for (const auto& [name, s] : streams) {
      if (s.get() == &stream) return *s;
    }
    fail(ExitCode::kInternal, "rank " + std::to_string(rank) + ": stream '" + stream.name() +
                                  "' is not one of the GPU runtime's streams");
  }

  void check_on_device(const at::Tensor& t, const std::string& what) const {
    if (!t.is_cuda() || t.get_device() != device || !t.is_contiguous()) {
      fail(ExitCode::kInternal, "rank " + std::to_string(rank) + ": " + what +
                                    " needs a contiguous tensor on cuda:" + std::to_string(device) +
                                    ", got one on " + t.device().str());
    }
  }
};

namespace {

std::string device_name(int device) {
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device) != cudaSuccess) return "unknown GPU";
  return props.name;
}

// "all_gather.0" -> "all_gather".
std::string kind_of(const std::string& name) {
  return name.substr(0, name.find('.'));
}

}  // namespace

std::unique_ptr<GpuRuntime> GpuRuntime::create(const schema::Plan& plan, const LaunchEnv& env,
                                               Rendezvous& rendezvous,
                                               std::chrono::milliseconds timeout) {
  const std::string who = "rank " + std::to_string(env.rank) + ": ";
  const GpuAvailability availability = gpu_availability(env);
  if (!availability.available) {
    fail(ExitCode::kRuntime,
         who + "cannot train on a GPU: " + availability.why_not + "; " + availability.fix);
  }
  auto impl = std::make_unique<Impl>();
  impl->rank = env.rank;
  const CudaDevice device = CudaDevice::select(env, &rendezvous);
  impl->device = device.index();
  impl->description = "cuda:" + std::to_string(device.index()) + " (" +
                      device_name(device.index()) + ", PCI " + device.pci_bus_id() + ")";

  impl->slots =
      std::make_unique<CudaSlots>(plan.memory, plan.policy.align_bytes, impl->device, env.rank);
  impl->compute =
      std::make_unique<CudaStream>("compute", impl->device, torch_current_stream(impl->device));
  impl->timing_events =
      std::make_unique<CudaEventPool>(impl->device, 64, "compute's timing", /*timing=*/true);
  const StreamLayout layout = stream_layout(plan.mesh, plan.policy, env.rank);
  for (const std::string& name : layout.streams) {
    impl->streams.emplace(name, make_cuda_stream(name, impl->device));
  }
  std::vector<NcclCommunicatorSpec> specs;
  for (const CommunicatorPlacement& placement : layout.communicators) {
    specs.push_back({placement.name, placement.group, impl->streams.at(placement.stream).get()});
  }
  impl->communicators = make_nccl_communicators(rendezvous, specs, timeout);
  for (const auto& comm : impl->communicators) {
    impl->by_kind[kind_of(comm->name())] = comm.get();
  }
  return std::unique_ptr<GpuRuntime>(new GpuRuntime(std::move(impl)));
}

GpuRuntime::GpuRuntime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuRuntime::~GpuRuntime() = default;

at::Device GpuRuntime::device() const {
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(impl_->device));
}

std::string GpuRuntime::describe() const {
  return impl_->description;
}

Stream& GpuRuntime::compute() {
  return *impl_->compute;
}

Stream& GpuRuntime::stream(const std::string& name) {
  const auto it = impl_->streams.find(name);
  if (it == impl_->streams.end()) {
    fail(ExitCode::kInternal,
         "rank " + std::to_string(impl_->rank) + ": no GPU stream '" + name + "' under this plan");
  }
  return *it->second;
}

Communicator* GpuRuntime::communicator(const std::string& kind) {
  const auto it = impl_->by_kind.find(kind);
  return it == impl_->by_kind.end() ? nullptr : it->second;
}

void* GpuRuntime::slot(int index) const {
  return impl_->slots->data(index);
}

int64_t GpuRuntime::slot_bytes() const {
  return impl_->slots->layout().total_bytes;
}

void GpuRuntime::reduce_scatter(Communicator& comm, const at::Tensor& input,
                                const at::Tensor& output, ReduceOp op, std::string what) {
  impl_->check_on_device(input, what);
  impl_->check_on_device(output, what);
  NcclCommunicator& nccl = impl_->nccl(comm);
  if (input.scalar_type() != output.scalar_type() ||
      input.numel() != output.numel() * nccl.size()) {
    fail(ExitCode::kInternal, "rank " + std::to_string(impl_->rank) + ": " + what + ": input of " +
                                  std::to_string(input.numel()) + " elements for an output of " +
                                  std::to_string(output.numel()) + " over " +
                                  std::to_string(nccl.size()) + " ranks, or dtypes differ");
  }
  nccl.reduce_scatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                      planner::dtype_name_of(input.scalar_type(), what), op, std::move(what));
}

void GpuRuntime::all_reduce(Communicator& comm, const at::Tensor& data, ReduceOp op,
                            std::string what) {
  impl_->check_on_device(data, what);
  impl_->nccl(comm).all_reduce(data.data_ptr(), static_cast<size_t>(data.numel()),
                               planner::dtype_name_of(data.scalar_type(), what), op,
                               std::move(what));
}

void GpuRuntime::run_on(Stream& stream, const std::function<void()>& work) {
  run_with_torch_stream(impl_->cuda(stream).native(), impl_->device, work);
}

void GpuRuntime::record_on(const at::Tensor& tensor, Stream& stream) {
  record_tensor_stream(tensor, impl_->cuda(stream).native(), impl_->device);
}

int64_t GpuRuntime::tensor_bytes() const {
  return torch_cuda_memory(impl_->device).allocated;
}

int64_t GpuRuntime::peak_tensor_bytes() const {
  return torch_cuda_memory(impl_->device).peak_allocated;
}

void GpuRuntime::reset_memory_peak() {
  reset_torch_cuda_peak(impl_->device);
}

void GpuRuntime::compute_wait(const std::shared_ptr<Event>& event) {
  Impl& impl = *impl_;
  // Bounded when nobody asks for exposed_us(): old stalls have long completed.
  if (impl.stalls.size() >= 256) impl.harvest();
  CurrentDevice current(impl.device);
  const cudaStream_t stream = impl.compute->native();
  const cudaEvent_t before = impl.timing_events->take();
  const cudaEvent_t after = impl.timing_events->take();
  impl.stalls.emplace_back(before, after);  // given back by harvest() or ~Impl
  const std::string doing = "rank " + std::to_string(impl.rank) + ": timing a wait of compute";
  check_cuda(cudaEventRecord(before, stream), doing);
  impl.compute->wait_for(event);
  check_cuda(cudaEventRecord(after, stream), doing);
}

int64_t GpuRuntime::exposed_us() {
  impl_->harvest();
  return impl_->stalled_us;
}

void GpuRuntime::check() const {
  // An event recorded on a failed stream throws its failure at once.
  for (const auto& [name, s] : impl_->streams) {
    if (s->failed()) s->record()->wait();
  }
  if (impl_->compute->failed()) impl_->compute->record()->wait();
}

void GpuRuntime::check_compute_stream(const std::string& where) const {
  if (torch_current_stream(impl_->device) == impl_->compute->native()) return;
  fail(ExitCode::kUsage, "rank " + std::to_string(impl_->rank) + ": " + where +
                             " runs on another CUDA stream than the one that was current when "
                             "the context was created; create the context on the stream you "
                             "train on, and do not switch streams around its calls");
}

}  // namespace mfsdp::executor
