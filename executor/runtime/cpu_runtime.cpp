#include "executor/runtime/cpu_runtime.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <utility>

#include "executor/comm/gloo_communicator.h"
#include "executor/runtime/cpu_stream.h"
#include "executor/runtime/flat_group.h"
#include "executor/runtime/timeline.h"
#include "planner/torchscript/host_memory.h"
#include "planner/torchscript/torch_model.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

class CpuRuntime final : public Runtime {
 public:
  CpuRuntime(const schema::Plan& plan, const LaunchEnv& env, Rendezvous& rendezvous,
             std::chrono::milliseconds timeout, std::string description)
      : layout_(stream_layout(plan.mesh, plan.policy, env.rank)),
        description_(std::move(description)) {
    for (const std::string& name : layout_.streams) streams_.emplace(name, make_cpu_stream(name));
    for (const CommunicatorPlacement& placement : layout_.communicators) {
      communicators_.push_back(rendezvous.gloo_communicator(
          placement.name, placement.group, *streams_.at(placement.stream), timeout));
    }
    for (const auto& slot : plan.memory.slots) {
      // Not zeroed: a unit's all-gather writes all of its bytes before anything reads them,
      // and pages untouched until then keep set-up's peak down.
      slots_.push_back(at::empty({slot.bytes}, at::TensorOptions().dtype(at::kByte)));
    }
  }

  // Streams stop (their queued collectives done) before the buffers their work points at go.
  ~CpuRuntime() override {
    communicators_.clear();
    streams_.clear();
  }

  at::Device device() const override { return at::kCPU; }
  const std::string& description() const override { return description_; }

  Stream& stream(StreamRole role) override { return *streams_.at(layout_.stream_for(role)); }
  Communicator* communicator(CommRole role) override { return gloo(role); }
  uint8_t* slot(int index) override { return slots_.at(index).data_ptr<uint8_t>(); }
  int64_t slot_bytes() const override {
    int64_t bytes = 0;
    for (const auto& slot : slots_) bytes += static_cast<int64_t>(slot.nbytes());
    return bytes;
  }

  void set_timeline(Timeline* timeline) override {
    timeline_ = timeline;
    for (CommRole role : {CommRole::kAllGather, CommRole::kReduceScatter, CommRole::kReplicas}) {
      if (GlooCommunicator* comm = gloo(role)) comm->set_timeline(timeline);
    }
  }

  // Compute is the calling thread: what it issued has happened.
  void after_compute(Stream&) override {}

  void compute_waits_for(const std::shared_ptr<Event>& event, const std::string& what) override {
    if (!event) return;
    if (event->done()) {
      event->wait();  // rethrows a failure
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    const int64_t start_us = timeline_ ? Timeline::now_us() : 0;
    event->wait();
    exposed_us_ += std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count();
    if (timeline_) timeline_->record("compute", "wait for " + what, start_us, Timeline::now_us());
  }
  int64_t exposed_us() override { return exposed_us_; }

  // The ring reads the gradients where autograd left them (as fp32) and adds straight into
  // the main gradient: no flat copy of the group, no output shard.
  void reduce_scatter_gradients(FlatGroup& group, const std::vector<at::Tensor>& grads,
                                const std::string& what) override {
    std::vector<at::Tensor> held;  // what the pieces point into, until the ring is done
    std::vector<FloatPiece> pieces;
    for (size_t p = 0; p < grads.size(); ++p) {
      if (!grads[p].defined()) continue;
      const auto& layout = group.layout().params[p];
      held.push_back(grads[p].to(at::kFloat).contiguous());
      pieces.push_back({static_cast<size_t>(layout.offset), static_cast<size_t>(layout.numel),
                        held.back().data_ptr<float>()});
    }
    std::sort(pieces.begin(), pieces.end(),
              [](const FloatPiece& a, const FloatPiece& b) { return a.offset < b.offset; });
    GlooCommunicator& comm = *gloo(CommRole::kReduceScatter);
    comm.reduce_scatter(std::move(pieces), group.main_grad().data_ptr<float>(),
                        static_cast<size_t>(group.layout().shard_numel), ReduceOp::kAvg,
                        /*accumulate=*/true, what);
    comm.stream().enqueue([held = std::move(held)]() mutable { held.clear(); },
                          "releasing the gradients of " + what);
  }

  void all_reduce(CommRole role, const at::Tensor& data, ReduceOp op,
                  const std::string& what) override {
    communicator_or_fail(role).all_reduce(data.data_ptr(), static_cast<size_t>(data.numel()),
                                          planner::dtype_name_of(data.scalar_type(), what), op,
                                          what);
  }

  double all_reduce_scalar(double value, ReduceOp op, const std::string& what) override {
    float v = static_cast<float>(value);
    Communicator& control = communicator_or_fail(CommRole::kControl);
    control.all_reduce(&v, 1, op, what);
    control.stream().synchronize();
    return v;
  }

  int64_t tensor_bytes() const override { return host_memory::tensor_bytes(); }
  int64_t peak_tensor_bytes() const override { return host_memory::peak_tensor_bytes(); }
  int64_t cached_at_peak_bytes() const override { return host_memory::cached_at_peak_bytes(); }
  void reset_memory_peak() override { host_memory::reset_peak(); }

  // Failures of CPU streams come out of the waits and synchronize calls.
  void check() override {}
  void check_compute_stream(const std::string&) override {}

 private:
  GlooCommunicator* gloo(CommRole role) const {
    const int index = layout_.communicator_for(role);
    return index < 0 ? nullptr : communicators_[index].get();
  }
  Communicator& communicator_or_fail(CommRole role) const {
    GlooCommunicator* comm = gloo(role);
    if (!comm) fail(ExitCode::kInternal, "this plan has no communicator for that collective");
    return *comm;
  }

  StreamLayout layout_;
  std::string description_;
  std::map<std::string, std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<GlooCommunicator>> communicators_;
  std::vector<at::Tensor> slots_;
  Timeline* timeline_ = nullptr;
  int64_t exposed_us_ = 0;
};

}  // namespace

std::unique_ptr<Runtime> make_cpu_runtime(const schema::Plan& plan, const LaunchEnv& env,
                                          Rendezvous& rendezvous, std::chrono::milliseconds timeout,
                                          const std::string& plan_name, std::string description) {
  if (plan.policy.reduce_dtype != "float32") {
    fail(ExitCode::kUsage, plan_name + ": reduce dtype " + plan.policy.reduce_dtype +
                               " is not supported on the CPU (Gloo); train on GPUs (--device "
                               "cuda) or plan with --reduce-dtype float32");
  }
  return std::make_unique<CpuRuntime>(plan, env, rendezvous, timeout, std::move(description));
}

}  // namespace mfsdp::executor
