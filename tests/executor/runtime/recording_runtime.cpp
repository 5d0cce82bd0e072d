#include "tests/executor/runtime/recording_runtime.h"

#include <ATen/ATen.h>

#include <cstring>
#include <map>

#include "executor/runtime/flat_group.h"
#include "planner/torchscript/host_memory.h"
#include "schema/error.h"

namespace mfsdp::executor::testing {
namespace {

class DoneEvent final : public Event {
 public:
  explicit DoneEvent(std::exception_ptr failure) : failure_(std::move(failure)) {}
  void wait() override {
    if (failure_) std::rethrow_exception(failure_);
  }
  bool done() const override { return true; }

 private:
  std::exception_ptr failure_;
};

// Runs work when it is enqueued. After a failure it runs nothing more and every later event
// carries the failure, as a CPU stream's would.
class InlineStream final : public Stream {
 public:
  explicit InlineStream(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  void enqueue(std::function<void()> work, std::string what) override {
    if (failure_) return;
    try {
      work();
    } catch (const std::exception& e) {
      failure_ = std::make_exception_ptr(Error(ExitCode::kRuntime, what + " failed: " + e.what()));
    }
  }
  std::shared_ptr<Event> record() override { return std::make_shared<DoneEvent>(failure_); }
  void wait_for(std::shared_ptr<Event>) override {}  // everything enqueued has run
  void synchronize() override { DoneEvent(failure_).wait(); }

 private:
  std::string name_;
  std::exception_ptr failure_;
};

class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(Stream& stream, std::shared_ptr<RuntimeRecord> record)
      : stream_(stream), record_(std::move(record)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Stream& stream() override { return stream_; }
  void set_timeline(Timeline*) override {}

  void all_gather(const void* in, void* out, size_t bytes, std::string what) override {
    run("all_gather", what, [=] { std::memcpy(out, in, bytes); });
  }
  // One rank: its input is the result, for any op.
  void reduce_scatter(const void* in, void* out, size_t count, const std::string& dtype, ReduceOp,
                      std::string what) override {
    const size_t bytes = count * static_cast<size_t>(schema::dtype_size(dtype));
    run("reduce_scatter", what, [=] { std::memcpy(out, in, bytes); });
  }
  void all_reduce(void*, size_t, const std::string&, ReduceOp, std::string what) override {
    run("all_reduce", what, [] {});
  }

  // Records the call, then enqueues `work`, failed when the record says so.
  void run(const std::string& kind, const std::string& what, std::function<void()> work) {
    record_->calls.push_back(kind + " " + what);
    const bool failing =
        !record_->fail_on.empty() && what.find(record_->fail_on) != std::string::npos;
    stream_.enqueue(
        [failing, work = std::move(work)] {
          if (failing) throw std::runtime_error("injected failure");
          work();
        },
        what);
  }

 private:
  Stream& stream_;
  std::shared_ptr<RuntimeRecord> record_;
};

class RecordingRuntime final : public Runtime {
 public:
  RecordingRuntime(const schema::Plan& plan, std::shared_ptr<RuntimeRecord> record)
      : layout_(stream_layout(plan.mesh, plan.policy, 0)), record_(std::move(record)) {
    for (const std::string& name : layout_.streams) {
      streams_.emplace(name, std::make_unique<InlineStream>(name));
    }
    for (const CommunicatorPlacement& placement : layout_.communicators) {
      communicators_.push_back(
          std::make_unique<RecordingCommunicator>(*streams_.at(placement.stream), record_));
    }
    for (const auto& slot : plan.memory.slots) {
      slots_.push_back(at::zeros({slot.bytes}, at::TensorOptions().dtype(at::kByte)));
    }
  }

  at::Device device() const override { return at::kCPU; }
  const std::string& description() const override { return description_; }
  Stream& stream(StreamRole role) override { return *streams_.at(layout_.stream_for(role)); }
  Communicator* communicator(CommRole role) override {
    const int index = layout_.communicator_for(role);
    return index < 0 ? nullptr : communicators_[index].get();
  }
  uint8_t* slot(int index) override { return slots_.at(index).data_ptr<uint8_t>(); }
  int64_t slot_bytes() const override {
    int64_t bytes = 0;
    for (const auto& slot : slots_) bytes += static_cast<int64_t>(slot.nbytes());
    return bytes;
  }
  void set_timeline(Timeline*) override {}
  void after_compute(Stream&) override {}
  void compute_waits_for(const std::shared_ptr<Event>& event, const std::string& what) override {
    record_->calls.push_back("wait " + what);
    if (event) event->wait();
  }
  int64_t exposed_us() override { return 0; }

  // One rank holds the whole group: its shard is the flat gradient, added to the main one.
  void reduce_scatter_gradients(FlatGroup& group, const std::vector<at::Tensor>& grads,
                                const std::string& what) override {
    auto* comm = static_cast<RecordingCommunicator*>(communicator(CommRole::kReduceScatter));
    comm->run("reduce_scatter", what, [&group, grads] {
      for (size_t p = 0; p < grads.size(); ++p) {
        if (!grads[p].defined()) continue;
        const schema::ParamLayout& param = group.layout().params[p];
        group.main_grad()
            .narrow(0, param.offset, param.numel)
            .add_(grads[p].reshape({-1}).to(group.main_grad().scalar_type()));
      }
    });
  }
  void all_reduce(CommRole role, const at::Tensor&, ReduceOp, const std::string& what) override {
    static_cast<RecordingCommunicator*>(communicator(role))->run("all_reduce", what, [] {});
  }
  double all_reduce_scalar(double value, ReduceOp, const std::string& what) override {
    record_->calls.push_back("all_reduce " + what);
    return value;
  }

  int64_t tensor_bytes() const override { return host_memory::tensor_bytes(); }
  int64_t peak_tensor_bytes() const override { return host_memory::peak_tensor_bytes(); }
  int64_t cached_at_peak_bytes() const override { return host_memory::cached_at_peak_bytes(); }
  void reset_memory_peak() override { host_memory::reset_peak(); }
  void check() override {}
  void check_compute_stream(const std::string&) override {}

 private:
  StreamLayout layout_;
  std::shared_ptr<RuntimeRecord> record_;
  std::string description_ = "recording";
  std::map<std::string, std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<RecordingCommunicator>> communicators_;
  std::vector<at::Tensor> slots_;
};

}  // namespace

std::vector<std::string> RuntimeRecord::of(const std::string& kind) const {
  std::vector<std::string> out;
  const std::string prefix = kind + " ";
  for (const std::string& call : calls) {
    if (call.rfind(prefix, 0) == 0) out.push_back(call.substr(prefix.size()));
  }
  return out;
}

std::unique_ptr<Runtime> make_recording_runtime(const schema::Plan& plan,
                                                std::shared_ptr<RuntimeRecord> record) {
  return std::make_unique<RecordingRuntime>(plan, std::move(record));
}

}  // namespace mfsdp::executor::testing
