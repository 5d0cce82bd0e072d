#pragma once
// runtime.h on the CPU: one worker-thread stream per stream_layout() stream, Gloo
// communicators on them, the plan's slots as host tensors (so that host_memory.h's counting
// allocator sees them once), and compute as the calling thread.

#include <chrono>
#include <memory>
#include <string>

#include "executor/runtime/runtime.h"

namespace mfsdp::executor {

// A collective over all ranks of the rendezvous (Gloo connects every communicator).
// Error(kUsage) naming `plan_name` when the plan reduces in a dtype Gloo cannot reduce.
// `description` is what Runtime::description() says ("cpu", or why auto chose it).
std::unique_ptr<Runtime> make_cpu_runtime(const schema::Plan& plan, const LaunchEnv& env,
                                          Rendezvous& rendezvous, std::chrono::milliseconds timeout,
                                          const std::string& plan_name,
                                          std::string description = "cpu");

}  // namespace mfsdp::executor
