#pragma once
// The MASTER_PORT that launch() gives its workers, checked (or picked) on node 0 before any
// worker starts. No LibTorch.

#include "executor/launch/launcher.h"

namespace mfsdp::launch {

// The MASTER_PORT the workers get. Node 0's rank 0 will host the store there, so on node 0 a
// port in use fails now, before anything starts, instead of as a store error in rank 0.
// Throws Error(kUsage) for a port in use or that cannot be bound, Error(kRuntime) when no free
// port can be found for --master-port 0.
int master_port_for_workers(const LaunchOptions& options);

}  // namespace mfsdp::launch
