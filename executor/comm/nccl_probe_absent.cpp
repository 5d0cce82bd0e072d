// nccl_probe.h in a build without the CUDA backend: refuses, as cuda_runtime_absent.cpp does.
#include "executor/comm/nccl_probe.h"

#include "schema/error.h"

namespace mfsdp::executor {

std::unique_ptr<ProbeBackend> make_nccl_probe_backend(const LaunchEnv& env, Rendezvous&,
                                                      std::chrono::milliseconds) {
  fail(ExitCode::kRuntime, "rank " + std::to_string(env.rank) +
                               ": cannot probe on a GPU: mfsdp was built without its CUDA "
                               "backend; configure with MFSDP_WITH_CUDA=ON where the CUDA "
                               "toolkit and NCCL are (docs/gpu.md)");
}

}  // namespace mfsdp::executor
