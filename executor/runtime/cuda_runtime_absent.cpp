// cuda_runtime.h in a build without the CUDA backend (MFSDP_WITH_CUDA off, or CUDA/NCCL not
// found): gpu_availability() says so and make_cuda_runtime() refuses.
#include "executor/runtime/cuda_runtime.h"

#include "schema/error.h"

namespace mfsdp::executor {
namespace {

const char* const kNoBackend = "mfsdp was built without its CUDA backend";
const char* const kFix =
    "configure with MFSDP_WITH_CUDA=ON where the CUDA toolkit and NCCL are (docs/gpu.md)";

}  // namespace

GpuAvailability gpu_availability(const LaunchEnv&) {
  return {false, kNoBackend, kFix};
}

std::unique_ptr<Runtime> make_cuda_runtime(const schema::Plan&, const LaunchEnv& env, Rendezvous&,
                                           std::chrono::milliseconds) {
  fail(ExitCode::kRuntime,
       "rank " + std::to_string(env.rank) + ": cannot train on a GPU: " + kNoBackend + "; " + kFix);
}

}  // namespace mfsdp::executor
