#include "executor/comm/gloo_communicator.h"

#include "executor/runtime/timeline.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/context.h>
#include <gloo/math.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <utility>

#include "executor/comm/ring_reduce_scatter.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

// Gloo prefixes its messages with "[/path/to/file.cc:123] "; the reader wants the rest.
std::string without_source_location(const std::string& message) {
  if (message.size() > 1 && message[0] == '[') {
    const size_t close = message.find("] ");
    if (close != std::string::npos && message.rfind(':', close) != std::string::npos) {
      return message.substr(close + 2);
    }
  }
  return message;
}

void divide(float* data, size_t count, int size) {
  const float divisor = static_cast<float>(size);
  for (size_t i = 0; i < count; ++i) data[i] /= divisor;
}

using ReduceFunction = void (*)(void*, const void*, const void*, size_t);

}  // namespace

GlooCommunicator::GlooCommunicator(std::shared_ptr<gloo::Context> context, Stream& stream,
                                   std::string name, int global_rank,
                                   std::chrono::milliseconds timeout)
    : context_(std::move(context)),
      stream_(stream),
      name_(std::move(name)),
      global_rank_(global_rank),
      timeout_(timeout) {}

int GlooCommunicator::rank() const {
  return context_->rank;
}
int GlooCommunicator::size() const {
  return context_->size;
}

template <typename Collective>
void GlooCommunicator::enqueue(std::string what, size_t bytes, Collective collective) {
  std::string label = "rank " + std::to_string(global_rank_) + ": " + what + " on " + name_;
  // The stream keeps its own copy: moving `what` in the same call as the capture would leave
  // the capture empty when the argument is evaluated first.
  std::string stream_what = what;
  stream_.enqueue(
      [label = std::move(label), collective = std::move(collective), timeline = timeline_,
       track = stream_.name(), what, bytes] {
        std::string reason;
        try {
          const int64_t start = timeline ? Timeline::now_us() : 0;
          collective();
          if (timeline) {
            timeline->record(track, what, start, Timeline::now_us(), static_cast<int64_t>(bytes));
          }
          return;
        } catch (const std::exception& e) {
          // gloo::IoException (a peer closed or reset the connection, or a timeout),
          // gloo::EnforceNotMet (a broken invariant), or the ring's own timeout.
          reason = without_source_location(e.what());
        }
        throw Error(ExitCode::kRuntime, label + " failed: " + reason);
      },
      std::move(stream_what));
}

void GlooCommunicator::all_gather(const void* in, void* out, size_t bytes, std::string what) {
  const size_t total = bytes * static_cast<size_t>(size());
  enqueue(std::move(what), total, [context = context_, in, out, bytes, timeout = timeout_] {
    if (bytes == 0) return;
    auto* gathered = static_cast<uint8_t*>(out);
    uint8_t* own = gathered + static_cast<size_t>(context->rank) * bytes;
    if (context->size == 1) {
      std::memmove(own, in, bytes);
      return;
    }
    gloo::AllgatherOptions options(context);
    // Without an input Gloo takes this rank's slice of the output as it is (in place).
    if (in != own) options.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), bytes);
    options.setOutput(gathered, bytes * static_cast<size_t>(context->size));
    options.setTimeout(timeout);
    gloo::allgather(options);
  });
}

void GlooCommunicator::check_reducible(const std::string& dtype, const std::string& what) const {
  if (dtype == "float32") return;
  fail(ExitCode::kUsage, "rank " + std::to_string(global_rank_) + ": " + what + " on " + name_ +
                             ": Gloo reduces float32 only, not " + dtype +
                             "; plan with --reduce-dtype float32, or train on GPUs (NCCL)");
}

void GlooCommunicator::reduce_scatter(const void* input, void* output, size_t count,
                                      const std::string& dtype, ReduceOp op, std::string what) {
  check_reducible(dtype, what);
  const auto* in = static_cast<const float*>(input);
  auto* out = static_cast<float*>(output);
  const size_t total = count * static_cast<size_t>(size()) * sizeof(float);
  enqueue(std::move(what), total, [context = context_, in, out, count, op, timeout = timeout_] {
    ring_reduce_scatter(*context, in, out, count, timeout);
    if (op == ReduceOp::kAvg) divide(out, count, context->size);
  });
}

void GlooCommunicator::reduce_scatter(std::vector<FloatPiece> in, float* out, size_t count,
                                      ReduceOp op, bool accumulate, std::string what) {
  const size_t total = count * static_cast<size_t>(size()) * sizeof(float);
  RingReduce how;
  how.accumulate = accumulate;
  if (op == ReduceOp::kAvg) how.divisor = static_cast<float>(size());
  enqueue(std::move(what), total,
          [context = context_, in = std::move(in), out, count, how, timeout = timeout_] {
            ring_reduce_scatter(*context, in, out, count, how, timeout);
          });
}

void GlooCommunicator::all_reduce(void* buffer, size_t count, const std::string& dtype, ReduceOp op,
                                  std::string what) {
  check_reducible(dtype, what);
  auto* data = static_cast<float*>(buffer);
  enqueue(std::move(what), count * sizeof(float),
          [context = context_, data, count, op, timeout = timeout_] {
            if (count == 0 || context->size == 1) return;
            gloo::AllreduceOptions options(context);
            options.setOutput(data, count);
            options.setReduceFunction(static_cast<ReduceFunction>(&gloo::sum<float>));
            options.setTimeout(timeout);
            gloo::allreduce(options);
            if (op == ReduceOp::kAvg) divide(data, count, context->size);
          });
}

}  // namespace mfsdp::executor
