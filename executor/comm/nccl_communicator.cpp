// NcclCommunicator (nccl_communicator.h): connecting, issuing collectives, releasing. The
// watchdog is in nccl_watchdog.cpp, make_nccl_communicators in nccl_bootstrap.cpp.
#include <algorithm>
#include <exception>
#include <iostream>
#include <utility>

#include "executor/comm/nccl_communicator_impl.h"
#include "executor/comm/nccl_dtype.h"
#include "executor/runtime/cuda_device.h"
#include "executor/runtime/cuda_error.h"
#include "executor/runtime/timeline.h"
#include "schema/plan.h"

namespace mfsdp::executor {
namespace {

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::kAvg ? ncclAvg : ncclSum;
}

}  // namespace

NcclFailure NcclCommunicator::Impl::describe(const std::string& what, ncclResult_t result) {
  NcclFailure f;
  f.rank = global_rank;
  f.communicator = name;
  f.what = what;
  f.result = result;
  if (comm != nullptr && !aborted) {
    ncclCommGetAsyncError(comm, &f.async_error);
    if (const char* last = ncclGetLastError(comm)) f.last_error = last;
  }
  return f;
}

ncclResult_t NcclCommunicator::Impl::settle(ncclResult_t result, Clock::time_point deadline) {
  while (result == ncclInProgress) {
    if (Clock::now() >= deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) result = ncclInternalError;
  }
  return result;
}

void NcclCommunicator::Impl::abort() {
  std::lock_guard<std::mutex> lock(call_mutex);
  if (aborted || comm == nullptr) return;
  aborted = true;
  ncclCommAbort(comm);
}

void NcclCommunicator::Impl::fail_and_abort(uint64_t ticket, ExitCode code,
                                            const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (failure) return;
    failure.emplace(code, message);
  }
  stream.fail(ticket, code, message);
  changed.notify_all();
  abort();
}

void NcclCommunicator::Impl::throw_if_failed(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex);
  if (failure) {
    throw Error(failure->code(), "rank " + std::to_string(global_rank) + ": " + what + " on " +
                                     name + " was not issued: the communicator failed " +
                                     "earlier: " + failure->what());
  }
}

template <typename Call>
void NcclCommunicator::Impl::issue(std::string what, int64_t bytes, Call call) {
  throw_if_failed(what);
  CurrentDevice current(stream.device());
  delay_stream_for_debugging(stream.native());  // the race amplifier; nothing unless asked for
  const uint64_t ticket = stream.note_work();
  const Clock::time_point deadline = Clock::now() + timeout;
  const int64_t issued_us = timeline ? Timeline::now_us() : 0;
  std::optional<std::pair<ExitCode, std::string>> failed;
  bool was_aborted = false;
  {
    std::lock_guard<std::mutex> lock(call_mutex);
    was_aborted = aborted;
    const ncclResult_t result =
        was_aborted ? ncclSuccess : settle(call(comm, stream.native()), deadline);
    if (result == ncclInProgress) {
      failed.emplace(ExitCode::kRuntime, nccl_timeout_message(global_rank, name, what, timeout));
    } else if (result != ncclSuccess) {
      const NcclFailure f = describe(what, result);
      failed.emplace(nccl_failure_code(f), nccl_failure_message(f));
    }
  }
  // The watchdog records its failure before it aborts, so this throws it.
  if (was_aborted) throw_if_failed(what);
  if (failed) {
    fail_and_abort(ticket, failed->first, failed->second);
    throw Error(failed->first, failed->second);
  }
  cudaEvent_t done = nullptr;
  try {
    done = events.take();
  } catch (const Error& e) {
    fail_and_abort(ticket, e.code(), e.what());
    throw;
  }
  InFlight work{ticket, std::move(what), done, deadline, issued_us, bytes, timeline};
  const cudaError_t recorded = cudaEventRecord(work.done, stream.native());
  if (recorded != cudaSuccess) {
    events.give(work.done);
    const std::string message =
        cuda_failure_message(recorded, "rank " + std::to_string(global_rank) +
                                           ": recording the end of " + work.what + " on " + name);
    fail_and_abort(ticket, cuda_exit_code(recorded), message);
    throw Error(cuda_exit_code(recorded), message);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    in_flight.push_back(std::move(work));
  }
  changed.notify_all();
}

void NcclCommunicator::Impl::connect(const std::string& unique_id) {
  const ncclUniqueId id = decode_unique_id(unique_id);
  CurrentDevice current(stream.device());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Non-blocking: the calls return at once, and a rank that never joins ends in a timeout
  // (and an abort) instead of a hang.
  config.blocking = 0;
  config.commName = name.c_str();
  const std::string what = "connecting (" + std::to_string(group_size) + " ranks, GPU " +
                           std::to_string(stream.device()) + ")";
  std::optional<std::pair<ExitCode, std::string>> failed;
  {
    std::lock_guard<std::mutex> lock(call_mutex);
    const ncclResult_t started = ncclCommInitRankConfig(&comm, group_size, id, group_rank, &config);
    const ncclResult_t result = comm == nullptr ? started : settle(started, Clock::now() + timeout);
    if (result == ncclInProgress) {
      failed.emplace(ExitCode::kRuntime, nccl_timeout_message(global_rank, name, what, timeout));
    } else if (result != ncclSuccess) {
      const NcclFailure f = describe(what, result);
      failed.emplace(nccl_failure_code(f), nccl_failure_message(f));
    }
  }
  if (failed) {
    abort();
    throw Error(failed->first, failed->second);
  }
}

void NcclCommunicator::Impl::release() {
  std::lock_guard<std::mutex> lock(call_mutex);
  if (comm == nullptr || aborted) return;
  const cudaError_t selected = cudaSetDevice(stream.device());
  if (selected != cudaSuccess) {
    std::cerr << "mfsdp: warning: rank " << global_rank << ": closing communicator " << name << ": "
              << cuda_error_text(selected) << "; aborting it\n";
    ncclCommAbort(comm);
    aborted = true;
    return;
  }
  // Finalizing waits for every member: bounded, since a peer that failed never arrives.
  const ncclResult_t finalized =
      settle(ncclCommFinalize(comm), Clock::now() + std::min(timeout, kCloseGrace));
  if (finalized == ncclSuccess) {
    // Once finalized, destroying frees local resources only, and the handle with them.
    const ncclResult_t destroyed = ncclCommDestroy(comm);
    if (destroyed != ncclSuccess && destroyed != ncclInProgress) {
      std::cerr << "mfsdp: warning: rank " << global_rank << ": destroying communicator " << name
                << " failed: " << nccl_result_text(destroyed) << "\n";
    }
  } else {
    std::cerr << "mfsdp: warning: rank " << global_rank << ": closing communicator " << name
              << " failed (" << nccl_result_text(finalized) << "); aborting it\n";
    ncclCommAbort(comm);
  }
  aborted = true;  // released either way
}

NcclCommunicator::NcclCommunicator(const std::string& unique_id, int group_rank, int group_size,
                                   CudaStream& stream, std::string name, int global_rank,
                                   std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>(stream, std::move(name), global_rank, group_rank, group_size,
                                   timeout)) {
  if (group_size < 1 || group_rank < 0 || group_rank >= group_size) {
    fail(ExitCode::kInternal, "rank " + std::to_string(global_rank) + ": communicator " +
                                  impl_->name + ": group rank " + std::to_string(group_rank) +
                                  " is not in a group of " + std::to_string(group_size));
  }
  impl_->connect(unique_id);
  impl_->watchdog = std::thread([impl = impl_.get()] { impl->watch(); });
}

NcclCommunicator::~NcclCommunicator() {
  // While an exception unwinds (another communicator failed to connect, a step failed) or
  // after this one failed, peers may never join a finalize or finish a collective: abort
  // now. Otherwise collectives in flight get kCloseGrace to finish.
  const bool failing = std::uncaught_exceptions() > 0 || failed();
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
    impl_->stop_deadline = Impl::Clock::now() + std::min(impl_->timeout, Impl::kCloseGrace);
  }
  if (failing) impl_->abort();
  impl_->changed.notify_all();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
  impl_->release();
  for (const Impl::InFlight& work : impl_->in_flight) impl_->events.give(work.done);
}

void NcclCommunicator::abort() {
  // As a failure, so that anything still waiting on the stream throws instead of trusting
  // what an aborted collective left.
  impl_->fail_and_abort(impl_->stream.note_work(), ExitCode::kRuntime,
                        "rank " + std::to_string(impl_->global_rank) + ": communicator " +
                            impl_->name + " was aborted after a failure elsewhere");
}

int NcclCommunicator::rank() const {
  return impl_->group_rank;
}
int NcclCommunicator::size() const {
  return impl_->group_size;
}
Stream& NcclCommunicator::stream() {
  return impl_->stream;
}
CudaStream& NcclCommunicator::cuda_stream() {
  return impl_->stream;
}
void NcclCommunicator::set_timeline(Timeline* timeline) {
  impl_->timeline = timeline;
}
const std::string& NcclCommunicator::name() const {
  return impl_->name;
}

bool NcclCommunicator::failed() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->failure.has_value();
}

void NcclCommunicator::all_gather(const void* in, void* out, size_t bytes, std::string what) {
  if (bytes == 0) return;  // the same on every rank, so skipping keeps the order
  impl_->issue(std::move(what), static_cast<int64_t>(bytes) * size(),
               [=](ncclComm_t comm, cudaStream_t stream) {
                 return ncclAllGather(in, out, bytes, ncclUint8, comm, stream);
               });
}

void NcclCommunicator::reduce_scatter(const void* in, void* out, size_t count,
                                      const std::string& dtype, ReduceOp op, std::string what) {
  const ncclDataType_t type = nccl_dtype(dtype);
  if (count == 0) return;
  const int64_t bytes = static_cast<int64_t>(count) * size() * schema::dtype_size(dtype);
  impl_->issue(std::move(what), bytes, [=](ncclComm_t comm, cudaStream_t stream) {
    return ncclReduceScatter(in, out, count, type, nccl_op(op), comm, stream);
  });
}

void NcclCommunicator::all_reduce(void* data, size_t count, const std::string& dtype, ReduceOp op,
                                  std::string what) {
  const ncclDataType_t type = nccl_dtype(dtype);
  if (count == 0) return;
  const int64_t bytes = static_cast<int64_t>(count) * schema::dtype_size(dtype);
  impl_->issue(std::move(what), bytes, [=](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(data, data, count, type, nccl_op(op), comm, stream);
  });
}

}  // namespace mfsdp::executor
