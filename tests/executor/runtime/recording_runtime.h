#pragma once
// A one-rank Runtime (executor/runtime/runtime.h) that records what the context asks of it,
// in order, and can fail a named collective: the context's tests run without Gloo, stream
// threads or other processes. Its streams run work at once, on the caller's thread.

#include <memory>
#include <string>
#include <vector>

#include "executor/runtime/runtime.h"

namespace mfsdp::executor::testing {

struct RuntimeRecord {
  // "all_gather WHAT", "wait WHAT", "reduce_scatter WHAT", "all_reduce WHAT", in call order.
  std::vector<std::string> calls;
  // A collective whose WHAT contains this fails on its stream, as a lost peer would.
  std::string fail_on;

  // The WHATs of the calls of one kind ("all_gather", ...), in order.
  std::vector<std::string> of(const std::string& kind) const;
};

// A RuntimeFactory (context_impl.h) whose runtimes record into `record`.
std::unique_ptr<Runtime> make_recording_runtime(const schema::Plan& plan,
                                                std::shared_ptr<RuntimeRecord> record);

}  // namespace mfsdp::executor::testing
