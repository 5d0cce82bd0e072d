#pragma once
// NCCL results as mfsdp::Error messages: one line with the rank, the collective (or setup
// step) and the communicator, NCCL's text for the call's result and for the communicator's
// asynchronous error, and what to do next. Also the watchdog's verdict on one in-flight
// collective, a plain function of what it observed, so it is tested without a GPU.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <string>

#include "schema/error.h"

namespace mfsdp::executor {

// "ncclRemoteError (remote process exited or there was a network error)".
std::string nccl_result_text(ncclResult_t result);

// kInternal for results that mean mfsdp called NCCL wrongly (invalid argument or usage);
// kRuntime otherwise (network, CUDA, a remote rank, NCCL itself).
ExitCode nccl_exit_code(ncclResult_t result);

struct NcclFailure {
  int rank = 0;                            // global rank of the caller
  std::string communicator;                // "all_gather.0"
  std::string what;                        // "all-gather of layers.3 group 0", "connecting"
  ncclResult_t result = ncclSuccess;       // the call's result; ncclSuccess: it failed later
  ncclResult_t async_error = ncclSuccess;  // ncclCommGetAsyncError's, after the failure
  std::string last_error;                  // ncclGetLastError's text; may be empty
};

// "rank 3: all-gather of layers.3 group 0 on all_gather.0 failed: <result>; async error:
// <async_error>; NCCL: <last_error>; <hint>". Parts that say nothing are left out.
std::string nccl_failure_message(const NcclFailure& failure);
ExitCode nccl_failure_code(const NcclFailure& failure);

// "rank 3: all-gather of layers.3 group 0 on all_gather.0 timed out after 5000 ms; the
// communicator was aborted. ..." with what usually causes it.
std::string nccl_timeout_message(int rank, const std::string& communicator, const std::string& what,
                                 std::chrono::milliseconds timeout);

enum class WorkVerdict { kRunning, kDone, kFailed, kTimedOut };

// The watchdog's verdict on the oldest in-flight collective of a communicator: `async_error`
// from ncclCommGetAsyncError (ncclInProgress is no error), `event` from cudaEventQuery of
// the event recorded after the collective, and `now` against its deadline. An error wins
// over completion, because an aborted or broken collective completes too.
WorkVerdict judge_in_flight(ncclResult_t async_error, cudaError_t event,
                            std::chrono::steady_clock::time_point now,
                            std::chrono::steady_clock::time_point deadline);

}  // namespace mfsdp::executor
