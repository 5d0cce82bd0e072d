#include "executor/runtime/cpu_stream.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "schema/error.h"

namespace mfsdp::executor {
namespace {

// Work items are numbered from 1 in enqueue order ("tickets"); an event is a ticket, and it
// has happened once the worker has finished (run or skipped) every item up to it.
struct Failure {
  uint64_t ticket = 0;
  ExitCode code = ExitCode::kRuntime;
  std::string message;
};

struct Item {
  uint64_t ticket = 0;
  std::function<void()> work;
  std::string what;
};

// Shared by the stream and its events, so an event stays valid after its stream is gone.
struct StreamState {
  explicit StreamState(std::string name) : name(std::move(name)) {}

  const std::string name;
  std::mutex mutex;
  std::condition_variable queued;    // the worker waits for work or shutdown
  std::condition_variable finished;  // waiters wait for `completed` to advance
  std::deque<Item> queue;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  bool stopping = false;
  std::optional<Failure> failure;  // the first failure; later items are skipped

  void wait_until(uint64_t ticket) {
    std::unique_lock<std::mutex> lock(mutex);
    finished.wait(lock, [&] { return completed >= ticket; });
    if (failure && failure->ticket <= ticket) throw Error(failure->code, failure->message);
  }
};

// Names the failing work once: messages of mfsdp::Error thrown by work that already names
// itself (the communicators do) are kept as they are.
Failure describe_failure(const Item& item, const std::string& stream_name) {
  Failure failure;
  failure.ticket = item.ticket;
  std::string reason;
  try {
    throw;
  } catch (const Error& e) {
    failure.code = e.code();
    reason = e.what();
  } catch (const std::exception& e) {
    reason = e.what();
  } catch (...) {
    reason = "unknown exception";
  }
  if (reason.find(item.what) != std::string::npos && !item.what.empty()) {
    failure.message = reason;
  } else {
    failure.message = item.what + " on stream '" + stream_name + "' failed: " + reason;
  }
  return failure;
}

class CpuEvent final : public Event {
 public:
  CpuEvent(std::shared_ptr<StreamState> state, uint64_t ticket)
      : state_(std::move(state)), ticket_(ticket) {}

  void wait() override { state_->wait_until(ticket_); }

  bool done() const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->completed >= ticket_;
  }

  const std::string& stream_name() const { return state_->name; }

 private:
  std::shared_ptr<StreamState> state_;
  uint64_t ticket_;
};

class CpuStream final : public Stream {
 public:
  explicit CpuStream(std::string name)
      : state_(std::make_shared<StreamState>(std::move(name))), worker_([this] { run(); }) {}

  ~CpuStream() override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->stopping = true;
    }
    state_->queued.notify_one();
    worker_.join();
  }

  const std::string& name() const override { return state_->name; }

  void enqueue(std::function<void()> work, std::string what) override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->queue.push_back(Item{++state_->enqueued, std::move(work), std::move(what)});
    }
    state_->queued.notify_one();
  }

  std::shared_ptr<Event> record() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return std::make_shared<CpuEvent>(state_, state_->enqueued);
  }

  void wait_for(std::shared_ptr<Event> event) override {
    std::string what = "wait for an event";
    if (auto* cpu_event = dynamic_cast<CpuEvent*>(event.get())) {
      what += " of stream '" + cpu_event->stream_name() + "'";
    }
    enqueue([event = std::move(event)] { event->wait(); }, std::move(what));
  }

  void synchronize() override { record()->wait(); }

 private:
  void run() {
    for (;;) {
      Item item;
      bool skip = false;
      {
        std::unique_lock<std::mutex> lock(state_->mutex);
        state_->queued.wait(lock, [&] { return !state_->queue.empty() || state_->stopping; });
        if (state_->queue.empty()) return;  // stopping, and drained
        item = std::move(state_->queue.front());
        state_->queue.pop_front();
        skip = state_->failure.has_value();
      }
      std::optional<Failure> failure;
      if (!skip) {
        try {
          item.work();
        } catch (...) {
          failure = describe_failure(item, state_->name);
        }
      }
      item.work = nullptr;  // release captured buffers before the event completes
      {
        std::lock_guard<std::mutex> lock(state_->mutex);
        if (failure && !state_->failure) state_->failure = std::move(failure);
        state_->completed = item.ticket;
      }
      state_->finished.notify_all();
    }
  }

  std::shared_ptr<StreamState> state_;
  std::thread worker_;
};

}  // namespace

std::unique_ptr<Stream> make_cpu_stream(std::string name) {
  return std::make_unique<CpuStream>(std::move(name));
}

}  // namespace mfsdp::executor
