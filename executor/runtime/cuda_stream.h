#pragma once
// The GPU side of stream.h: a CudaStream wraps a cudaStream_t (non-blocking, so it never
// synchronizes with the legacy default stream) and a CudaEvent a cudaEvent_t without timing.
// Device work is issued on native() by its owner (NCCL, LibTorch kernels); host work is not
// accepted: enqueue() throws. Failures are reported to the stream by whoever watches the work
// (the NCCL watchdog) and are rethrown by every wait on an event recorded after that work,
// and by waits on streams that wait_for() such an event, as on CPU.

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "executor/runtime/stream.h"
#include "schema/error.h"

namespace mfsdp::executor {

struct CudaStreamState;

class CudaEvent final : public Event {
 public:
  CudaEvent(std::shared_ptr<CudaStreamState> state, cudaEvent_t event, uint64_t ticket);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  // Polls the event (the calling thread stays free of CUDA's blocking waits, so a failure
  // the watchdog reports ends the wait even while the device is stuck).
  void wait() override;
  bool done() const override;

  cudaEvent_t native() const { return event_; }
  const std::string& stream_name() const;

 private:
  friend class CudaStream;
  std::shared_ptr<CudaStreamState> state_;
  cudaEvent_t event_;
  uint64_t ticket_;
};

class CudaStream final : public Stream {
 public:
  // Creates the stream on `device`; Error(kRuntime) when CUDA cannot.
  CudaStream(std::string name, int device);
  // Wraps a stream created elsewhere (LibTorch's compute stream, say) without owning it, so
  // that other streams can wait for its events and it for theirs.
  CudaStream(std::string name, int device, cudaStream_t borrowed);
  // An owned stream: waits for its work unless it has failed, then destroys it. A borrowed
  // one is left to its owner.
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  const std::string& name() const override;
  // Always throws Error(kInternal): a GPU stream runs device work only.
  void enqueue(std::function<void()> work, std::string what) override;
  std::shared_ptr<Event> record() override;
  // `event` must be a CudaEvent (Error(kInternal) otherwise). A failure of the work it marks,
  // reported now or later, fails this stream from here on.
  void wait_for(std::shared_ptr<Event> event) override;
  void synchronize() override;

  cudaStream_t native() const;
  int device() const;

  // Numbers device work that others issue on native(), so that a failure reported for it
  // later fails exactly the events recorded after it. Returns the work's ticket.
  uint64_t note_work();
  // Records the stream's failure (the first report wins) at work `ticket`: waits on events
  // recorded from then on throw Error(code, message), at once, done or not.
  void fail(uint64_t ticket, ExitCode code, const std::string& message);
  bool failed() const;

 private:
  std::shared_ptr<CudaStreamState> state_;
};

std::unique_ptr<CudaStream> make_cuda_stream(std::string name, int device);

// The race amplifier (docs/gpu.md, "Checking on a GPU"): with MFSDP_DEBUG_STREAM_DELAY_US=N in
// the environment, or after set_debug_stream_delay(N us), delay_stream_for_debugging() puts a
// host function that sleeps N us on `stream`, so that the work issued after it starts late. The
// NCCL communicators call it before every collective and the GPU runtime before adding a
// reduce-scatter's output into the main gradients: a missing wait between streams then gives
// wrong numbers instead of passing by luck. 0 (the default) issues nothing. Error(kUsage) for
// a value that is not a number of microseconds up to 60 s.
void delay_stream_for_debugging(cudaStream_t stream);
// Only the next delay_stream_for_debugging() call, on whichever stream, sleeps `delay` (instead
// of the set delay): one collective held up, as by a peer that never arrives.
void delay_next_stream_work_once(std::chrono::microseconds delay);
// MFSDP_DEBUG_STREAM_DELAY_US's value (null or empty: 0).
std::chrono::microseconds parse_debug_stream_delay(const char* text);
void set_debug_stream_delay(std::chrono::microseconds delay);
std::chrono::microseconds debug_stream_delay();

}  // namespace mfsdp::executor
