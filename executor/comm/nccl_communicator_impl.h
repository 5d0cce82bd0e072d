#pragma once
// The NCCL communicator's state, private to its files (executor/README.md):
//   nccl_communicator.cpp  the public class: connecting, issuing collectives, releasing
//   nccl_watchdog.cpp      the watchdog thread: the collectives in flight against their
//                          deadlines, and the communicator's asynchronous errors
// make_nccl_communicators (nccl_bootstrap.cpp) needs only the public class.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "executor/comm/nccl_communicator.h"
#include "executor/comm/nccl_error.h"
#include "executor/runtime/cuda_event_pool.h"
#include "schema/error.h"

namespace mfsdp::executor {

struct NcclCommunicator::Impl {
  using Clock = std::chrono::steady_clock;

  // How long closing a communicator waits for its collectives in flight and for
  // ncclCommFinalize's quiescence before it aborts instead (or the timeout, if shorter).
  static constexpr std::chrono::milliseconds kCloseGrace{10000};

  // A collective between its issue and the watchdog seeing its event complete.
  struct InFlight {
    uint64_t ticket = 0;
    std::string what;
    cudaEvent_t done = nullptr;  // recorded on the stream right after the collective
    Clock::time_point deadline;
    int64_t issued_us = 0;
    int64_t bytes = 0;
    Timeline* timeline = nullptr;
  };

  Impl(CudaStream& stream, std::string name, int global_rank, int group_rank, int group_size,
       std::chrono::milliseconds timeout)
      : stream(stream),
        name(std::move(name)),
        global_rank(global_rank),
        group_rank(group_rank),
        group_size(group_size),
        timeout(timeout) {}

  CudaStream& stream;
  const std::string name;
  // The events that mark each collective's end, made with the communicator.
  CudaEventPool events{stream.device(), 64, "communicator " + name};
  const int global_rank;
  const int group_rank;
  const int group_size;
  const std::chrono::milliseconds timeout;
  Timeline* timeline = nullptr;  // read and written by the issuing thread only

  // Every use of `comm` holds call_mutex, so that an abort on the watchdog thread never frees
  // it under a call on the issuing thread. Calls do not block: the communicator is
  // non-blocking, and a call that reports ncclInProgress is awaited up to its deadline.
  std::mutex call_mutex;
  ncclComm_t comm = nullptr;
  bool aborted = false;

  // The watchdog's state.
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<InFlight> in_flight;
  std::optional<Error> failure;
  bool stopping = false;
  // Once stopping: collectives still in flight then are aborted, not awaited to their own
  // deadlines (up to the collective timeout, 30 min by default).
  Clock::time_point stop_deadline = Clock::time_point::max();
  std::thread watchdog;

  NcclFailure describe(const std::string& what, ncclResult_t result);
  // With call_mutex held: waits while the communicator reports ncclInProgress. Returns its
  // final state, or ncclInProgress when `deadline` passed first.
  ncclResult_t settle(ncclResult_t result, Clock::time_point deadline);
  void abort();
  // Reports the first failure to the stream (its waiters throw from now on), then aborts the
  // communicator, which ends any of its kernels still running or stuck.
  void fail_and_abort(uint64_t ticket, ExitCode code, const std::string& message);
  void throw_if_failed(const std::string& what);

  // Issues `call(comm, stream)` and hands its completion to the watchdog. Defined in
  // nccl_communicator.cpp, where the collectives are.
  template <typename Call>
  void issue(std::string what, int64_t bytes, Call call);

  struct Problem {
    uint64_t ticket = 0;
    ExitCode code = ExitCode::kRuntime;
    std::string message;
  };

  // The watchdog thread: every `period`, the communicator's asynchronous error and the
  // in-flight collectives, each against its deadline.
  void watch();
  // ncclCommGetAsyncError, or nothing once the communicator is aborted.
  std::optional<ncclResult_t> poll_async_error();
  // With `mutex` held: retires the collectives that completed (in stream order, oldest first)
  // and judges the oldest one still in flight.
  std::optional<Problem> check_in_flight(ncclResult_t async_error);
  Problem problem_of(uint64_t ticket, const std::string& what, ncclResult_t async_error,
                     cudaError_t event);

  void connect(const std::string& unique_id);
  // After the watchdog has stopped. Never throws: a destructor calls it.
  void release();
};

}  // namespace mfsdp::executor
