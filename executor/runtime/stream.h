#pragma once
// Streams and events, the same contract on CPU and GPU. A stream is an ordered queue of work;
// an event marks a point in it; the host or another stream can wait for an event. On CPU a
// stream is a worker thread (cpu_stream.h); on GPU it wraps a cudaStream_t and cudaEvent_t.
// Work enqueued on a stream must keep its buffers alive until an event recorded after it
// has completed.

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace mfsdp::executor {

class Event {
 public:
  virtual ~Event() = default;
  // Blocks the calling thread until the marked work has run. Rethrows, as mfsdp::Error
  // (kRuntime), the failure of any work on the stream up to that point.
  virtual void wait() = 0;
  virtual bool done() const = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual const std::string& name() const = 0;
  // Runs `work` after everything enqueued before it. `what` names it in error messages,
  // e.g. "all-gather of layers.3". CPU streams run it on their thread; GPU streams do not
  // take host work (they throw).
  virtual void enqueue(std::function<void()> work, std::string what) = 0;
  // An event at the current end of the queue.
  virtual std::shared_ptr<Event> record() = 0;
  // Work enqueued on this stream from now on starts after `event` completes.
  virtual void wait_for(std::shared_ptr<Event> event) = 0;
  // Blocks until everything enqueued so far has run; rethrows a failure like Event::wait.
  virtual void synchronize() = 0;
};

}  // namespace mfsdp::executor
