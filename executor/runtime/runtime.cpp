// make_runtime: the one place that asks which device a rank trains on.
#include "executor/runtime/runtime.h"

#include "executor/runtime/cpu_runtime.h"
#include "executor/runtime/cuda_runtime.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

// Whether this rank trains on its GPU, by `device` ("cpu", "cuda", "auto"), agreed by all
// ranks: each says whether it can, and `auto` picks cuda only when all can. Sets
// `description` to "cpu" plus, for auto, why. Error(kRuntime) on every rank when cuda was
// asked for and some rank cannot, naming the first.
bool choose_gpu(Rendezvous& rendezvous, const LaunchEnv& env, const std::string& device,
                std::string& description) {
  if (device == "cpu") return false;
  const GpuAvailability mine = gpu_availability(env);
  const std::vector<std::string> all = rendezvous.exchange(
      "mfsdp/gpu-available", mine.available ? "" : mine.why_not + "\n" + mine.fix);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    const std::string why = all[r].substr(0, all[r].find('\n'));
    const std::string fix = all[r].substr(all[r].find('\n') + 1);
    if (device == "cuda") {
      fail(ExitCode::kRuntime, "rank " + std::to_string(r) + " cannot train on a GPU: " + why +
                                   "; " + fix + ", or train with --device cpu");
    }
    description = "cpu (auto: rank " + std::to_string(r) + " has no usable GPU: " + why + ")";
    return false;
  }
  return true;
}

}  // namespace

void check_device_name(const std::string& device) {
  if (device != "cpu" && device != "cuda" && device != "auto") {
    fail(ExitCode::kUsage, "device must be cpu, cuda or auto, got '" + device + "'");
  }
}

std::unique_ptr<Runtime> make_runtime(const schema::Plan& plan, const LaunchEnv& env,
                                      Rendezvous& rendezvous, const RuntimeOptions& options) {
  check_device_name(options.device);
  std::string description = "cpu";
  if (choose_gpu(rendezvous, env, options.device, description)) {
    return make_cuda_runtime(plan, env, rendezvous, options.collective_timeout);
  }
  return make_cpu_runtime(plan, env, rendezvous, options.collective_timeout, options.plan_name,
                          description);
}

}  // namespace mfsdp::executor
