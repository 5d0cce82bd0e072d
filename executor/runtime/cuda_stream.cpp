#include "executor/runtime/cuda_stream.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "executor/runtime/cuda_device.h"
#include "executor/runtime/cuda_error.h"
#include "executor/runtime/cuda_event_pool.h"

namespace mfsdp::executor {

// Work on a stream is numbered from 1 ("tickets", as on CPU): an event marks every ticket up
// to its own, and a failure at ticket t fails the events from t on.
struct CudaStreamState {
  struct Failure {
    uint64_t ticket = 0;
    ExitCode code = ExitCode::kRuntime;
    std::string message;
  };
  // Another stream that waits, from its ticket `waiter_ticket` on, for this stream's work up to
  // ticket `after`: it fails with this stream when that work fails.
  struct Dependent {
    std::weak_ptr<CudaStreamState> waiter;
    uint64_t waiter_ticket = 0;
    uint64_t after = 0;
    // An event of this stream at `after`: once it has completed the entry can go, even when
    // nobody waits on the host (compute only ever waits on the device).
    std::shared_ptr<CudaEvent> marker;
  };

  CudaStreamState(std::string name, int device) : name(std::move(name)), device(device) {}

  const std::string name;
  const int device;
  std::unique_ptr<CudaEventPool> events;  // record()'s events, made with the stream
  cudaStream_t stream = nullptr;
  bool owned = true;
  mutable std::mutex mutex;
  uint64_t issued = 0;
  uint64_t completed = 0;  // the highest ticket seen complete
  std::optional<Failure> failure;
  std::vector<Dependent> dependents;

  void throw_if_failed(uint64_t ticket) const {
    std::lock_guard<std::mutex> lock(mutex);
    if (failure && failure->ticket <= ticket) throw Error(failure->code, failure->message);
  }

  void mark_completed(uint64_t ticket) {
    std::lock_guard<std::mutex> lock(mutex);
    if (ticket > completed) completed = ticket;
  }

  void fail(uint64_t ticket, ExitCode code, const std::string& message) {
    std::vector<Dependent> affected;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (failure) return;
      failure = Failure{ticket, code, message};
      for (const Dependent& d : dependents) {
        if (d.after >= ticket) affected.push_back(d);
      }
      dependents.clear();
    }
    // Outside the lock: a waiter may itself have dependents, and never this stream's lock.
    for (const Dependent& d : affected) {
      if (auto waiter = d.waiter.lock()) waiter->fail(d.waiter_ticket, code, message);
    }
  }

  // Registers `waiter`, or fails it at once when the work it waits for has already failed.
  void add_dependent(const std::shared_ptr<CudaStreamState>& waiter, uint64_t waiter_ticket,
                     uint64_t after, std::shared_ptr<CudaEvent> marker) {
    std::optional<Failure> already;
    std::vector<Dependent> forgotten;  // released outside the lock (they hold events)
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (failure && failure->ticket <= after) {
        already = failure;
      } else if (!failure) {
        // Work that has completed without failing cannot fail any more: forget its waiters.
        // Their markers say how far the device got; the list stays as short as the work in
        // flight.
        for (const Dependent& d : dependents) {
          if (d.after > completed && d.marker && query_event(d.marker->native()) == cudaSuccess) {
            completed = d.after;
          }
        }
        std::vector<Dependent> kept;
        for (Dependent& d : dependents) {
          (d.after > completed && !d.waiter.expired() ? kept : forgotten).push_back(std::move(d));
        }
        dependents = std::move(kept);
        dependents.push_back(Dependent{waiter, waiter_ticket, after, std::move(marker)});
      }
    }
    if (already) waiter->fail(waiter_ticket, already->code, already->message);
  }

  // The markers hold this state: drop them when the stream goes, or neither would be freed.
  void forget_dependents() {
    std::vector<Dependent> forgotten;
    std::lock_guard<std::mutex> lock(mutex);
    forgotten.swap(dependents);
  }
};

namespace {

// Events a stream makes up front: enough for the events alive at once in a step (one per
// gathered unit, the collectives in flight); more are made if ever needed.
constexpr int kStreamEvents = 64;

// Short waits (an all-gather a layer ahead) end within microseconds; long ones should not
// burn a core.
void pause_polling(unsigned polls) {
  if (polls < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(polls < 1024 ? 10 : 100));
  }
}

}  // namespace

CudaEvent::CudaEvent(std::shared_ptr<CudaStreamState> state, cudaEvent_t event, uint64_t ticket)
    : state_(std::move(state)), event_(event), ticket_(ticket) {}

CudaEvent::~CudaEvent() {
  // Back to the stream's pool, pending or not (a later record() re-records it).
  state_->events->give(event_);
}

const std::string& CudaEvent::stream_name() const {
  return state_->name;
}

void CudaEvent::wait() {
  for (unsigned polls = 0;; ++polls) {
    state_->throw_if_failed(ticket_);
    const cudaError_t status = query_event(event_);
    if (status == cudaSuccess) {
      state_->mark_completed(ticket_);
      // Aborted collectives complete too; their failure was reported before the abort.
      state_->throw_if_failed(ticket_);
      return;
    }
    if (status != cudaErrorNotReady) {
      const std::string message =
          cuda_failure_message(status, "waiting for stream '" + state_->name + "'");
      state_->fail(ticket_, cuda_exit_code(status), message);
      throw Error(cuda_exit_code(status), message);
    }
    pause_polling(polls);
  }
}

bool CudaEvent::done() const {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->failure && state_->failure->ticket <= ticket_) return true;
  }
  const cudaError_t status = query_event(event_);
  if (status == cudaSuccess) state_->mark_completed(ticket_);
  // An error counts as done: wait() reports it.
  return status != cudaErrorNotReady;
}

CudaStream::CudaStream(std::string name, int device)
    : state_(std::make_shared<CudaStreamState>(std::move(name), device)) {
  CurrentDevice current(device);
  check_cuda(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking),
             "creating CUDA stream '" + state_->name + "' on GPU " + std::to_string(device));
  state_->events =
      std::make_unique<CudaEventPool>(device, kStreamEvents, "stream '" + state_->name + "'");
}

CudaStream::CudaStream(std::string name, int device, cudaStream_t borrowed)
    : state_(std::make_shared<CudaStreamState>(std::move(name), device)) {
  state_->stream = borrowed;
  state_->owned = false;
  state_->events =
      std::make_unique<CudaEventPool>(device, kStreamEvents, "stream '" + state_->name + "'");
}

CudaStream::~CudaStream() {
  state_->forget_dependents();
  if (!state_->owned) return;
  // Like a CPU stream, finish the work first: its buffers may be freed right after.
  if (!failed()) cudaStreamSynchronize(state_->stream);
  cudaStreamDestroy(state_->stream);
}

const std::string& CudaStream::name() const {
  return state_->name;
}

void CudaStream::enqueue(std::function<void()>, std::string what) {
  mfsdp::fail(ExitCode::kInternal,
              "stream '" + state_->name + "' is a CUDA stream and runs device " +
                  "work only, but was given host work: " + what +
                  "; run it on the CPU, or issue it on the stream's cudaStream_t");
}

std::shared_ptr<Event> CudaStream::record() {
  CurrentDevice current(state_->device);
  cudaEvent_t event = state_->events->take();
  const std::string doing = "recording an event on stream '" + state_->name + "'";
  uint64_t ticket = 0;
  {
    // Under the lock, so that work noted concurrently is either before the event or after it.
    std::lock_guard<std::mutex> lock(state_->mutex);
    ticket = state_->issued;
  }
  const cudaError_t recorded = cudaEventRecord(event, state_->stream);
  if (recorded != cudaSuccess) {
    state_->events->give(event);
    check_cuda(recorded, doing);
  }
  return std::make_shared<CudaEvent>(state_, event, ticket);
}

void CudaStream::wait_for(std::shared_ptr<Event> event) {
  auto* cuda_event = dynamic_cast<CudaEvent*>(event.get());
  if (cuda_event == nullptr) {
    mfsdp::fail(ExitCode::kInternal,
                "CUDA stream '" + state_->name +
                    "' was asked to wait for an event that is not a CUDA event; "
                    "a GPU stream can only wait for GPU streams");
  }
  CurrentDevice current(state_->device);
  check_cuda(cudaStreamWaitEvent(state_->stream, cuda_event->native(), 0),
             "stream '" + state_->name + "' waiting for an event of stream '" +
                 cuda_event->stream_name() + "'");
  if (cuda_event->state_ == state_) return;  // already ordered
  cuda_event->state_->add_dependent(state_, note_work(), cuda_event->ticket_,
                                    std::static_pointer_cast<CudaEvent>(event));
}

void CudaStream::synchronize() {
  record()->wait();
}

cudaStream_t CudaStream::native() const {
  return state_->stream;
}

int CudaStream::device() const {
  return state_->device;
}

uint64_t CudaStream::note_work() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return ++state_->issued;
}

void CudaStream::fail(uint64_t ticket, ExitCode code, const std::string& message) {
  state_->fail(ticket, code, message);
}

bool CudaStream::failed() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->failure.has_value();
}

std::unique_ptr<CudaStream> make_cuda_stream(std::string name, int device) {
  return std::make_unique<CudaStream>(std::move(name), device);
}

// --- The race amplifier ----------------------------------------------------------------
namespace {

constexpr std::chrono::microseconds kMaxDebugDelay = std::chrono::seconds(60);

std::atomic<int64_t>& delay_us() {
  static std::atomic<int64_t> value{
      parse_debug_stream_delay(std::getenv("MFSDP_DEBUG_STREAM_DELAY_US")).count()};
  return value;
}

// delay_next_stream_work_once(): taken by the next delay_stream_for_debugging() alone.
std::atomic<int64_t> one_shot_us{0};

void CUDART_CB sleep_on_stream(void* us) {
  std::this_thread::sleep_for(std::chrono::microseconds(reinterpret_cast<uintptr_t>(us)));
}

}  // namespace

std::chrono::microseconds parse_debug_stream_delay(const char* text) {
  if (!text || !*text) return std::chrono::microseconds(0);
  char* end = nullptr;
  errno = 0;
  const long long us = std::strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || us < 0 || us > kMaxDebugDelay.count()) {
    throw Error(ExitCode::kUsage, std::string("MFSDP_DEBUG_STREAM_DELAY_US=") + text +
                                      " is not a delay in microseconds from 0 to 60000000");
  }
  return std::chrono::microseconds(us);
}

std::chrono::microseconds debug_stream_delay() {
  return std::chrono::microseconds(delay_us().load());
}

void set_debug_stream_delay(std::chrono::microseconds delay) {
  if (delay.count() < 0 || delay > kMaxDebugDelay) {
    throw Error(ExitCode::kInternal, "a debug stream delay must be from 0 to 60 s");
  }
  delay_us() = delay.count();
}

void delay_next_stream_work_once(std::chrono::microseconds delay) {
  if (delay.count() < 0 || delay > kMaxDebugDelay) {
    throw Error(ExitCode::kInternal, "a debug stream delay must be from 0 to 60 s");
  }
  one_shot_us = delay.count();
}

void delay_stream_for_debugging(cudaStream_t stream) {
  int64_t us = one_shot_us.exchange(0);
  if (us == 0) us = delay_us().load();
  if (us == 0) return;
  check_cuda(cudaLaunchHostFunc(stream, sleep_on_stream,
                                reinterpret_cast<void*>(static_cast<uintptr_t>(us))),
             "delaying a stream (MFSDP_DEBUG_STREAM_DELAY_US)");
}

}  // namespace mfsdp::executor
