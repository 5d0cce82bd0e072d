#include "executor/runtime/cuda_device.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <array>

#include "executor/runtime/cuda_error.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

const char kOneRankPerGpu[] =
    "launch at most one rank per GPU (--nproc-per-node <= GPUs per node), and let every rank "
    "of a node see all of its GPUs: LOCAL_RANK picks one (check CUDA_VISIBLE_DEVICES)";

std::string host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "unknown-host";
  return name.data();
}

std::string pci_bus_id_of(int device) {
  std::array<char, 64> id{};
  check_cuda(cudaDeviceGetPCIBusId(id.data(), static_cast<int>(id.size()), device),
             "reading the PCI bus id of GPU " + std::to_string(device));
  return id.data();
}

}  // namespace

DeviceCount query_device_count() {
  DeviceCount visible;
  const cudaError_t error = cudaGetDeviceCount(&visible.count);
  if (error != cudaSuccess) {
    visible.count = 0;
    visible.error = cuda_error_text(error);
    // A failed query leaves a sticky "last error" that a later, unrelated check would report.
    cudaGetLastError();
  }
  return visible;
}

int choose_device(const LaunchEnv& env, const DeviceCount& visible) {
  const std::string rank = "rank " + std::to_string(env.rank) + ": ";
  if (visible.count <= 0) {
    fail(ExitCode::kRuntime,
         rank + "no CUDA device is visible (cudaGetDeviceCount " +
             (visible.error.empty() ? std::string("found 0") : "failed: " + visible.error) +
             "); run on a GPU node, and check the NVIDIA driver (nvidia-smi) and "
             "CUDA_VISIBLE_DEVICES");
  }
  const std::string devices = std::to_string(visible.count) + " CUDA device(s)";
  if (env.local_world_size > visible.count) {
    fail(ExitCode::kRuntime, rank + "LOCAL_WORLD_SIZE=" + std::to_string(env.local_world_size) +
                                 " ranks on this host share " + devices + "; " + kOneRankPerGpu);
  }
  if (env.local_rank < 0 || env.local_rank >= visible.count) {
    fail(ExitCode::kRuntime, rank + "LOCAL_RANK=" + std::to_string(env.local_rank) +
                                 " has no GPU: this process sees " + devices + " (0.." +
                                 std::to_string(visible.count - 1) + "); " + kOneRankPerGpu);
  }
  return env.local_rank;
}

std::string device_identity(int device) {
  return host_name() + "\t" + pci_bus_id_of(device);
}

void check_devices_distinct(const std::vector<std::string>& identities, int rank) {
  for (size_t b = 1; b < identities.size(); ++b) {
    for (size_t a = 0; a < b; ++a) {
      if (identities[a] != identities[b]) continue;
      const std::string& id = identities[a];
      const size_t tab = id.find('\t');
      const std::string host = tab == std::string::npos ? "?" : id.substr(0, tab);
      const std::string bus = tab == std::string::npos ? id : id.substr(tab + 1);
      fail(ExitCode::kRuntime, "rank " + std::to_string(rank) + ": ranks " + std::to_string(a) +
                                   " and " + std::to_string(b) + " both use the GPU at PCI " + bus +
                                   " on host " + host + "; " + kOneRankPerGpu);
    }
  }
}

CurrentDevice::CurrentDevice(int device) {
  check_cuda(cudaGetDevice(&previous_), "reading the current CUDA device");
  if (previous_ != device) {
    check_cuda(cudaSetDevice(device), "selecting CUDA device " + std::to_string(device));
  }
}

CurrentDevice::~CurrentDevice() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

CudaDevice CudaDevice::select(const LaunchEnv& env, Rendezvous* rendezvous) {
  const int index = choose_device(env, query_device_count());
  check_cuda(cudaSetDevice(index), "rank " + std::to_string(env.rank) + ": selecting GPU " +
                                       std::to_string(index) + " (cudaSetDevice)");
  const std::string identity = device_identity(index);
  if (rendezvous != nullptr && rendezvous->world_size() > 1) {
    check_devices_distinct(rendezvous->exchange("mfsdp/cuda-device", identity), env.rank);
  }
  return CudaDevice(index, identity.substr(identity.find('\t') + 1));
}

}  // namespace mfsdp::executor
