#include "executor/comm/nccl_error.h"

namespace mfsdp::executor {
namespace {

const char* result_name(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return nullptr;
  }
}

// NCCL's own texts already say to rerun with NCCL_DEBUG where that helps.
const char* hint_for(ncclResult_t result) {
  switch (result) {
    case ncclUnhandledCudaError:
      return "a CUDA call inside NCCL failed (a GPU fault or a driver problem)";
    case ncclSystemError:
      return "a system call or the network failed; check NCCL_SOCKET_IFNAME";
    case ncclInternalError:
      return "NCCL hit an internal error";
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return "mfsdp called NCCL wrongly, which is a bug in mfsdp; please report it";
    case ncclRemoteError:
      return "another rank failed or its connection broke; the first error on the other ranks "
             "says why";
    default:
      return "rerun with NCCL_DEBUG=WARN for NCCL's account";
  }
}

bool is_error(ncclResult_t result) {
  return result != ncclSuccess && result != ncclInProgress;
}

}  // namespace

std::string nccl_result_text(ncclResult_t result) {
  const char* name = result_name(result);
  return (name ? std::string(name) : "ncclResult " + std::to_string(static_cast<int>(result))) +
         " (" + ncclGetErrorString(result) + ")";
}

ExitCode nccl_exit_code(ncclResult_t result) {
  return result == ncclInvalidArgument || result == ncclInvalidUsage ? ExitCode::kInternal
                                                                     : ExitCode::kRuntime;
}

ExitCode nccl_failure_code(const NcclFailure& failure) {
  return nccl_exit_code(is_error(failure.result) ? failure.result : failure.async_error);
}

std::string nccl_failure_message(const NcclFailure& failure) {
  const ncclResult_t cause = is_error(failure.result) ? failure.result : failure.async_error;
  std::string message = "rank " + std::to_string(failure.rank) + ": " + failure.what + " on " +
                        failure.communicator + " failed: ";
  if (is_error(failure.result)) {
    message += nccl_result_text(failure.result);
    if (is_error(failure.async_error)) {
      message += "; async error: " + nccl_result_text(failure.async_error);
    }
  } else {
    message += "async error: " + nccl_result_text(failure.async_error);
  }
  if (!failure.last_error.empty()) message += "; NCCL: " + failure.last_error;
  return message + "; " + hint_for(cause);
}

std::string nccl_timeout_message(int rank, const std::string& communicator, const std::string& what,
                                 std::chrono::milliseconds timeout) {
  return "rank " + std::to_string(rank) + ": " + what + " on " + communicator +
         " timed out after " + std::to_string(timeout.count()) +
         " ms; the communicator was aborted. A rank that stopped issuing collectives (it "
         "failed, hangs, or runs another plan) holds up the others: see the first error on the "
         "other ranks, or raise collective_timeout if the collective is just slow";
}

WorkVerdict judge_in_flight(ncclResult_t async_error, cudaError_t event,
                            std::chrono::steady_clock::time_point now,
                            std::chrono::steady_clock::time_point deadline) {
  if (is_error(async_error)) return WorkVerdict::kFailed;
  if (event == cudaSuccess) return WorkVerdict::kDone;
  if (event != cudaErrorNotReady) return WorkVerdict::kFailed;
  return now >= deadline ? WorkVerdict::kTimedOut : WorkVerdict::kRunning;
}

}  // namespace mfsdp::executor
