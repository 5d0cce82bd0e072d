#include "executor/comm/ring_reduce_scatter.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mfsdp::executor {
namespace {

using Clock = std::chrono::steady_clock;

// Gloo reads a zero timeout as "wait forever", so a spent deadline must fail here instead.
std::chrono::milliseconds time_left(Clock::time_point deadline, std::chrono::milliseconds timeout,
                                    const std::string& waiting_for) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) {
    throw std::runtime_error("timed out after " + std::to_string(timeout.count()) +
                             " ms waiting for " + waiting_for);
  }
  return left;
}

bool overlaps(const float* a, size_t a_count, const float* b, size_t b_count) {
  const auto a_begin = reinterpret_cast<std::uintptr_t>(a);
  const auto b_begin = reinterpret_cast<std::uintptr_t>(b);
  return a_begin < b_begin + b_count * sizeof(float) && b_begin < a_begin + a_count * sizeof(float);
}

}  // namespace

void ring_reduce_scatter(gloo::Context& context, const float* in, float* out, size_t count,
                         std::chrono::milliseconds timeout) {
  const int size = context.size;
  const int rank = context.rank;
  const size_t bytes = count * sizeof(float);
  if (count == 0) return;
  if (size == 1) {
    std::memmove(out, in, bytes);
    return;
  }
  const auto deadline = Clock::now() + timeout;
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  auto chunk = [&](int c) { return in + static_cast<size_t>(((c % size) + size) % size) * count; };
  // Every rank takes the same slot because collectives run in the same order everywhere.
  const uint64_t slot = context.nextSlot();

  // Step s receives the partial sum of chunk (rank-s-2) from the left into buffer s%2, adds its
  // own input, and sends it on at step s+1, so after size-1 steps buffer (size-2)%2 holds this
  // rank's chunk summed over all ranks. That buffer is `out` itself unless `out` overlaps
  // `in` (the input is read until the last step).
  const bool out_is_staging = !overlaps(out, count, in, count * size);
  std::vector<float> scratch(out_is_staging ? count : 2 * count);
  const int last = (size - 2) % 2;
  float* staging[2];
  staging[1 - last] = scratch.data();
  staging[last] = out_is_staging ? out : scratch.data() + count;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffers[2] = {
      context.createUnboundBuffer(staging[0], bytes),
      context.createUnboundBuffer(staging[1], bytes)};
  // Gloo's buffers are untyped and mutable; the first step only sends from this one.
  std::unique_ptr<gloo::transport::UnboundBuffer> own_first =
      context.createUnboundBuffer(const_cast<float*>(chunk(rank - 1)), bytes);

  for (int step = 0; step < size - 1; ++step) {
    gloo::transport::UnboundBuffer& to_right = step == 0 ? *own_first : *buffers[(step + 1) % 2];
    gloo::transport::UnboundBuffer& from_left = *buffers[step % 2];
    from_left.recv(left, slot);
    to_right.send(right, slot);
    const std::string at_step =
        " (ring step " + std::to_string(step + 1) + " of " + std::to_string(size - 1) + ")";
    if (!from_left.waitRecv(
            time_left(deadline, timeout, "group rank " + std::to_string(left) + at_step))) {
      throw std::runtime_error("receive from group rank " + std::to_string(left) + " aborted");
    }
    if (!to_right.waitSend(
            time_left(deadline, timeout, "group rank " + std::to_string(right) + at_step))) {
      throw std::runtime_error("send to group rank " + std::to_string(right) + " aborted");
    }
    float* partial = staging[step % 2];
    const float* own = chunk(rank - step - 2);
    for (size_t i = 0; i < count; ++i) partial[i] += own[i];
  }
  if (!out_is_staging) std::memcpy(out, staging[last], bytes);
}

}  // namespace mfsdp::executor
