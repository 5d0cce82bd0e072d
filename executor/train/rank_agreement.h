#pragma once
// How a collective step that can fail on some ranks ends the same way on all of them: each
// rank attempts its part, then all agree, so no rank waits forever for one that threw. Saving
// and loading checkpoints are made of such steps. No LibTorch in this header.

#include <exception>
#include <functional>
#include <string>

#include "schema/error.h"

namespace mfsdp::executor {

class Context;

// Runs this rank's part of a collective operation and returns its error instead of throwing,
// so that every rank reaches the agreement below. Foreign exceptions become `code`.
std::exception_ptr attempt(ExitCode code, const std::string& what,
                           const std::function<void()>& part);

// A barrier at which every rank learns whether all parts succeeded: a rank whose part failed
// throws its own error, the others one that points at it.
void agree(Context& context, const std::exception_ptr& mine, ExitCode code,
           const std::string& others_failed);

}  // namespace mfsdp::executor
