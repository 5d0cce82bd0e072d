// GpuRuntime in a build without the CUDA backend (MFSDP_WITH_CUDA off or CUDA/NCCL not found):
// gpu_availability() says so and create() refuses, so nothing else is ever reached.
#include "executor/runtime/gpu_runtime.h"

#include "schema/error.h"

namespace mfsdp::executor {
namespace {

const char* const kNoBackend = "mfsdp was built without its CUDA backend";
const char* const kFix =
    "configure with MFSDP_WITH_CUDA=ON where the CUDA toolkit and NCCL are (docs/gpu.md)";

[[noreturn]] void absent() {
  fail(ExitCode::kInternal, std::string("GPU runtime used although ") + kNoBackend);
}

}  // namespace

struct GpuRuntime::Impl {};

GpuAvailability gpu_availability(const LaunchEnv&) {
  return {false, kNoBackend, kFix};
}

std::unique_ptr<GpuRuntime> GpuRuntime::create(const schema::Plan&, const LaunchEnv& env,
                                               Rendezvous&, std::chrono::milliseconds) {
  fail(ExitCode::kRuntime,
       "rank " + std::to_string(env.rank) + ": cannot train on a GPU: " + kNoBackend + "; " + kFix);
}

GpuRuntime::GpuRuntime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuRuntime::~GpuRuntime() = default;
at::Device GpuRuntime::device() const {
  absent();
}
std::string GpuRuntime::describe() const {
  absent();
}
Stream& GpuRuntime::compute() {
  absent();
}
Stream& GpuRuntime::stream(const std::string&) {
  absent();
}
Communicator* GpuRuntime::communicator(const std::string&) {
  absent();
}
void* GpuRuntime::slot(int) const {
  absent();
}
int64_t GpuRuntime::slot_bytes() const {
  absent();
}
void GpuRuntime::reduce_scatter(Communicator&, const at::Tensor&, const at::Tensor&, ReduceOp,
                                std::string) {
  absent();
}
void GpuRuntime::all_reduce(Communicator&, const at::Tensor&, ReduceOp, std::string) {
  absent();
}
void GpuRuntime::run_on(Stream&, const std::function<void()>&) {
  absent();
}
void GpuRuntime::record_on(const at::Tensor&, Stream&) {
  absent();
}
void GpuRuntime::check() const {
  absent();
}
void GpuRuntime::compute_wait(const std::shared_ptr<Event>&) {
  absent();
}
int64_t GpuRuntime::exposed_us() {
  absent();
}
int64_t GpuRuntime::tensor_bytes() const {
  absent();
}
int64_t GpuRuntime::peak_tensor_bytes() const {
  absent();
}
void GpuRuntime::reset_memory_peak() {
  absent();
}
void GpuRuntime::check_compute_stream(const std::string&) const {
  absent();
}

}  // namespace mfsdp::executor
