#pragma once
// Which GPU a rank uses: LOCAL_RANK picks it among the devices the process sees, one rank per
// GPU. The decisions are plain functions of their inputs (testable without a GPU); CudaDevice
// applies them and checks across ranks, through the rendezvous, that no two ranks share one.

#include <string>
#include <vector>

#include "executor/comm/rendezvous.h"

namespace mfsdp::executor {

// What cudaGetDeviceCount said: `count` devices, or `error` (its text) when it failed.
struct DeviceCount {
  int count = 0;
  std::string error;
};

DeviceCount query_device_count();

// The device index for `env.local_rank`. Throws Error(kRuntime), starting "rank R: ", when
// no device is visible, when LOCAL_WORLD_SIZE exceeds the visible devices (so every rank of
// the host fails alike, not only those left without one), or when LOCAL_RANK has none.
int choose_device(const LaunchEnv& env, const DeviceCount& visible);

// "host\tpci-bus-id" of `device` on this host: what two ranks must not have in common.
std::string device_identity(int device);

// Throws Error(kRuntime) naming the first two ranks whose identities (one per rank, in rank
// order) are equal: two ranks on one host mapped to one GPU.
void check_devices_distinct(const std::vector<std::string>& identities, int rank);

// Makes `device` current for the calling thread and restores the previous one on exit; CUDA
// keeps the current device per thread, so every thread that issues work sets it.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = -1;
};

class CudaDevice {
 public:
  // Chooses this rank's device (choose_device) and makes it current (cudaSetDevice). With a
  // rendezvous, also exchanges device identities and fails on every rank when two share a
  // GPU: then it is a collective over all ranks of the rendezvous.
  static CudaDevice select(const LaunchEnv& env, Rendezvous* rendezvous);

  int index() const { return index_; }
  const std::string& pci_bus_id() const { return pci_bus_id_; }

 private:
  CudaDevice(int index, std::string pci_bus_id)
      : index_(index), pci_bus_id_(std::move(pci_bus_id)) {}
  int index_;
  std::string pci_bus_id_;
};

}  // namespace mfsdp::executor
