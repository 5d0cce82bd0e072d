// The watchdog of an NcclCommunicator (nccl_communicator_impl.h): one thread per
// communicator that retires the collectives in flight, and fails and aborts the communicator
// when one fails or passes its deadline, or NCCL reports an asynchronous error.
#include <algorithm>

#include "executor/comm/nccl_communicator_impl.h"
#include "executor/runtime/cuda_error.h"
#include "executor/runtime/timeline.h"

namespace mfsdp::executor {

void NcclCommunicator::Impl::watch() {
  const cudaError_t selected = cudaSetDevice(stream.device());
  if (selected != cudaSuccess) {
    // Its event queries would ask another device: fail the communicator instead of guessing.
    fail_and_abort(
        0, cuda_exit_code(selected),
        cuda_failure_message(selected, "rank " + std::to_string(global_rank) +
                                           ": the watchdog of communicator " + name +
                                           " selecting GPU " + std::to_string(stream.device())));
    return;
  }
  const auto period = std::clamp<std::chrono::milliseconds>(
      timeout / 10, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
  std::unique_lock<std::mutex> lock(mutex);
  while (!failure && !(stopping && in_flight.empty())) {
    changed.wait_for(lock, period);
    if (failure) return;
    lock.unlock();
    const std::optional<ncclResult_t> async_error = poll_async_error();
    lock.lock();
    if (!async_error) return;  // aborted
    if (std::optional<Problem> problem = check_in_flight(*async_error)) {
      lock.unlock();
      fail_and_abort(problem->ticket, problem->code, problem->message);
      return;
    }
  }
}

std::optional<ncclResult_t> NcclCommunicator::Impl::poll_async_error() {
  std::lock_guard<std::mutex> lock(call_mutex);
  if (aborted) return std::nullopt;
  ncclResult_t async_error = ncclSuccess;
  if (ncclCommGetAsyncError(comm, &async_error) != ncclSuccess) async_error = ncclInternalError;
  return async_error;
}

auto NcclCommunicator::Impl::check_in_flight(ncclResult_t async_error) -> std::optional<Problem> {
  while (!in_flight.empty()) {
    InFlight& oldest = in_flight.front();
    const cudaError_t event = query_event(oldest.done);
    const bool closing = stop_deadline < oldest.deadline;
    switch (judge_in_flight(async_error, event, Clock::now(),
                            closing ? stop_deadline : oldest.deadline)) {
      case WorkVerdict::kRunning:
        return std::nullopt;
      case WorkVerdict::kTimedOut:
        if (closing) {
          return Problem{oldest.ticket, ExitCode::kRuntime,
                         "rank " + std::to_string(global_rank) + ": " + oldest.what + " on " +
                             name +
                             " was still in flight when the communicator was closed; "
                             "it was aborted"};
        }
        return Problem{oldest.ticket, ExitCode::kRuntime,
                       nccl_timeout_message(global_rank, name, oldest.what, timeout)};
      case WorkVerdict::kFailed:
        return problem_of(oldest.ticket, oldest.what, async_error, event);
      case WorkVerdict::kDone:
        break;
    }
    if (oldest.timeline) {
      oldest.timeline->record(stream.name(), oldest.what, oldest.issued_us, Timeline::now_us(),
                              oldest.bytes);
    }
    events.give(oldest.done);
    in_flight.pop_front();
  }
  if (async_error != ncclSuccess && async_error != ncclInProgress) {
    return problem_of(stream.note_work(), "health check", async_error, cudaSuccess);
  }
  return std::nullopt;
}

auto NcclCommunicator::Impl::problem_of(uint64_t ticket, const std::string& what,
                                        ncclResult_t async_error, cudaError_t event) -> Problem {
  if (async_error == ncclSuccess || async_error == ncclInProgress) {
    const std::string doing = "rank " + std::to_string(global_rank) + ": " + what + " on " + name;
    return Problem{ticket, cuda_exit_code(event), cuda_failure_message(event, doing)};
  }
  NcclFailure f;
  {
    std::lock_guard<std::mutex> lock(call_mutex);
    f = describe(what, ncclSuccess);
  }
  f.async_error = async_error;
  return Problem{ticket, nccl_failure_code(f), nccl_failure_message(f)};
}

}  // namespace mfsdp::executor
