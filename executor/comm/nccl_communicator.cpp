#include "executor/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "executor/comm/nccl_dtype.h"
#include "executor/comm/nccl_error.h"
#include "executor/runtime/cuda_device.h"
#include "executor/runtime/cuda_error.h"
#include "executor/runtime/cuda_event_pool.h"
#include "executor/runtime/timeline.h"
#include "schema/error.h"
#include "schema/plan.h"

namespace mfsdp::executor {
namespace {

using Clock = std::chrono::steady_clock;

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

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::kAvg ? ncclAvg : ncclSum;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ",") + std::to_string(r);
  return text;
}

}  // namespace

struct NcclCommunicator::Impl {
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
  std::thread watchdog;

  NcclFailure describe(const std::string& what, ncclResult_t result) {
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

  // With call_mutex held: waits while the communicator reports ncclInProgress. Returns its
  // final state, or ncclInProgress when `deadline` passed first.
  ncclResult_t settle(ncclResult_t result, Clock::time_point deadline) {
    while (result == ncclInProgress) {
      if (Clock::now() >= deadline) return ncclInProgress;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) result = ncclInternalError;
    }
    return result;
  }

  void abort() {
    std::lock_guard<std::mutex> lock(call_mutex);
    if (aborted || comm == nullptr) return;
    aborted = true;
    ncclCommAbort(comm);
  }

  // Reports the first failure to the stream (its waiters throw from now on), then aborts the
  // communicator, which ends any of its kernels still running or stuck.
  void fail_and_abort(uint64_t ticket, ExitCode code, const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (failure) return;
      failure.emplace(code, message);
    }
    stream.fail(ticket, code, message);
    changed.notify_all();
    abort();
  }

  void throw_if_failed(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    if (failure) {
      throw Error(failure->code(), "rank " + std::to_string(global_rank) + ": " + what + " on " +
                                       name + " was not issued: the communicator failed " +
                                       "earlier: " + failure->what());
    }
  }

  // Issues `call(comm, stream)` and hands its completion to the watchdog.
  template <typename Call>
  void issue(std::string what, int64_t bytes, Call call) {
    throw_if_failed(what);
    CurrentDevice current(stream.device());
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

  struct Problem {
    uint64_t ticket = 0;
    ExitCode code = ExitCode::kRuntime;
    std::string message;
  };

  // The watchdog thread: every `period`, the communicator's asynchronous error and the
  // in-flight collectives, each against its deadline.
  void watch() {
    cudaSetDevice(stream.device());
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

  // ncclCommGetAsyncError, or nothing once the communicator is aborted.
  std::optional<ncclResult_t> poll_async_error() {
    std::lock_guard<std::mutex> lock(call_mutex);
    if (aborted) return std::nullopt;
    ncclResult_t async_error = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async_error) != ncclSuccess) async_error = ncclInternalError;
    return async_error;
  }

  // With `mutex` held: retires the collectives that completed (in stream order, oldest first)
  // and judges the oldest one still in flight.
  std::optional<Problem> check_in_flight(ncclResult_t async_error) {
    while (!in_flight.empty()) {
      InFlight& oldest = in_flight.front();
      const cudaError_t event = cudaEventQuery(oldest.done);
      switch (judge_in_flight(async_error, event, Clock::now(), oldest.deadline)) {
        case WorkVerdict::kRunning:
          return std::nullopt;
        case WorkVerdict::kTimedOut:
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

  Problem problem_of(uint64_t ticket, const std::string& what, ncclResult_t async_error,
                     cudaError_t event) {
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

  void connect(const std::string& unique_id) {
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
      const ncclResult_t started =
          ncclCommInitRankConfig(&comm, group_size, id, group_rank, &config);
      const ncclResult_t result =
          comm == nullptr ? started : settle(started, Clock::now() + timeout);
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

  // After the watchdog has stopped. Never throws: a destructor calls it.
  void release() {
    std::lock_guard<std::mutex> lock(call_mutex);
    if (comm == nullptr || aborted) return;
    cudaSetDevice(stream.device());
    const ncclResult_t finalized = settle(ncclCommFinalize(comm), Clock::now() + timeout);
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
};

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
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->changed.notify_all();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
  impl_->release();
  for (const InFlight& work : impl_->in_flight) impl_->events.give(work.done);
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

void NcclCommunicator::broadcast(void* data, size_t bytes, int root, std::string what) {
  if (root < 0 || root >= size()) {
    fail(ExitCode::kInternal, "rank " + std::to_string(impl_->global_rank) + ": " + what + " on " +
                                  impl_->name + ": root " + std::to_string(root) +
                                  " is not a rank of the group (size " + std::to_string(size()) +
                                  ")");
  }
  if (bytes == 0) return;
  impl_->issue(std::move(what), static_cast<int64_t>(bytes),
               [=](ncclComm_t comm, cudaStream_t stream) {
                 return ncclBroadcast(data, data, bytes, ncclUint8, root, comm, stream);
               });
}

std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(
    Rendezvous& rendezvous, const std::vector<NcclCommunicatorSpec>& specs,
    std::chrono::milliseconds timeout) {
  const int rank = rendezvous.rank();
  std::vector<int> group_ranks;
  std::set<std::string> names;
  std::vector<std::pair<std::string, std::string>> led;  // ids of the groups this rank leads
  for (const NcclCommunicatorSpec& spec : specs) {
    const std::string label = "rank " + std::to_string(rank) + ": NCCL communicator '" + spec.name +
                              "' over ranks {" + rank_list(spec.group) + "}";
    int group_rank = -1;
    for (size_t i = 0; i < spec.group.size(); ++i) {
      const int r = spec.group[i];
      if (r < 0 || r >= rendezvous.world_size() || (i > 0 && r <= spec.group[i - 1])) {
        fail(ExitCode::kInternal, label + ": the group must list distinct ranks of 0.." +
                                      std::to_string(rendezvous.world_size() - 1) +
                                      " in ascending order");
      }
      if (r == rank) group_rank = static_cast<int>(i);
    }
    if (group_rank < 0) fail(ExitCode::kInternal, label + ": this rank is not a member");
    if (spec.stream == nullptr) fail(ExitCode::kInternal, label + ": no stream");
    if (!names.insert(spec.name).second) {
      fail(ExitCode::kInternal, label + ": the name is already taken by another communicator");
    }
    group_ranks.push_back(group_rank);
    if (group_rank == 0) {
      ncclUniqueId id{};
      const ncclResult_t result = ncclGetUniqueId(&id);
      if (result != ncclSuccess) {
        NcclFailure f;
        f.rank = rank;
        f.communicator = spec.name;
        f.what = "making its unique id";
        f.result = result;
        fail(nccl_failure_code(f), nccl_failure_message(f));
      }
      led.emplace_back(spec.name, encode_unique_id(id));
    }
  }
  const std::vector<std::string> published =
      rendezvous.exchange("mfsdp/nccl-unique-ids", publish_unique_ids(led));

  std::vector<std::unique_ptr<NcclCommunicator>> communicators;
  for (size_t c = 0; c < specs.size(); ++c) {
    const NcclCommunicatorSpec& spec = specs[c];
    const int leader = spec.group.front();
    const std::string id = find_unique_id(published.at(leader), spec.name);
    if (id.empty()) {
      fail(ExitCode::kInternal,
           "rank " + std::to_string(rank) + ": NCCL communicator '" + spec.name +
               "': its first rank, " + std::to_string(leader) +
               ", published no id for it; every rank must create its communicators in one "
               "call, with the same names and groups on every member");
    }
    communicators.push_back(
        std::make_unique<NcclCommunicator>(id, group_ranks[c], static_cast<int>(spec.group.size()),
                                           *spec.stream, spec.name, rank, timeout));
  }
  return communicators;
}

}  // namespace mfsdp::executor
