#pragma once

#include <memory>
#include <string>

#include "executor/runtime/stream.h"

namespace mfsdp::executor {

// A stream backed by its own worker thread. After a work item throws, later items on the
// stream are skipped and every wait rethrows that first failure (with its `what`): as
// Error(kRuntime), or with the code of an mfsdp::Error the work threw. A message that already
// names the work's `what` is kept as is. The destructor runs what is queued, then joins.
std::unique_ptr<Stream> make_cpu_stream(std::string name);

}  // namespace mfsdp::executor
