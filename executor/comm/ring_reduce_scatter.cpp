#include "executor/comm/ring_reduce_scatter.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

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

// Reads ranges of the input that the pieces make up, zeros between them.
class PieceReader {
 public:
  explicit PieceReader(const std::vector<FloatPiece>& pieces) : pieces_(pieces) {}

  // The range's floats if one piece holds all of them, else nullptr.
  const float* contiguous(size_t offset, size_t n) const {
    const FloatPiece* piece = piece_at(offset);
    if (piece == nullptr || offset + n > piece->offset + piece->count) return nullptr;
    return piece->data + (offset - piece->offset);
  }

  void copy_to(size_t offset, size_t n, float* out) const {
    std::fill(out, out + n, 0.0f);
    visit(offset, n, [&](size_t at, const float* data, size_t k) {
      std::memcpy(out + at, data, k * sizeof(float));
    });
  }

  void add_to(size_t offset, size_t n, float* out) const {
    visit(offset, n, [&](size_t at, const float* data, size_t k) {
      for (size_t i = 0; i < k; ++i) out[at + i] += data[i];
    });
  }

 private:
  const std::vector<FloatPiece>& pieces_;

  // The piece containing `offset`, if any.
  const FloatPiece* piece_at(size_t offset) const {
    auto after = std::upper_bound(pieces_.begin(), pieces_.end(), offset,
                                  [](size_t at, const FloatPiece& p) { return at < p.offset; });
    if (after == pieces_.begin()) return nullptr;
    const FloatPiece& piece = *(after - 1);
    return offset < piece.offset + piece.count ? &piece : nullptr;
  }

  // Calls f(position in the range, data, count) for each piece's part of [offset, offset + n).
  template <typename F>
  void visit(size_t offset, size_t n, F f) const {
    auto it = std::upper_bound(pieces_.begin(), pieces_.end(), offset,
                               [](size_t at, const FloatPiece& p) { return at < p.offset; });
    if (it != pieces_.begin()) --it;
    for (; it != pieces_.end() && it->offset < offset + n; ++it) {
      const size_t lo = std::max(offset, it->offset);
      const size_t hi = std::min(offset + n, it->offset + it->count);
      if (lo < hi) f(lo - offset, it->data + (lo - it->offset), hi - lo);
    }
  }
};

// Where a ring step receives into: an unbound buffer and a float offset in it.
struct Staging {
  gloo::transport::UnboundBuffer* buffer;
  float* base;
  size_t offset;
  float* data() const { return base + offset; }
};

}  // namespace

void ring_reduce_scatter(gloo::Context& context, const std::vector<FloatPiece>& in, float* out,
                         size_t count, const RingReduce& how, std::chrono::milliseconds timeout) {
  const int size = context.size;
  const int rank = context.rank;
  if (count == 0) return;
  const PieceReader input(in);
  auto chunk_offset = [&](int c) {
    return static_cast<size_t>(((c % size) + size) % size) * count;
  };
  // The final sums of a range of this rank's chunk, at `partial`, into `out`.
  auto finish = [&](size_t at, size_t n, float* partial) {
    float* dst = out + at;
    if (how.accumulate) {
      for (size_t i = 0; i < n; ++i) dst[i] += partial[i] / how.divisor;
    } else if (how.divisor != 1.0f) {
      for (size_t i = 0; i < n; ++i) dst[i] = partial[i] / how.divisor;
    } else if (dst != partial) {
      std::memcpy(dst, partial, n * sizeof(float));
    }
  };
  if (size == 1) {
    std::vector<float> own(count);
    input.copy_to(0, count, own.data());
    finish(0, count, own.data());
    return;
  }
  const auto deadline = Clock::now() + timeout;
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  const size_t slice = std::max<size_t>(1, std::min(how.slice, count));
  // Every rank takes the same slot because collectives run in the same order everywhere.
  const uint64_t slot = context.nextSlot();

  // For each slice of the chunks, step s receives the partial sum of chunk (rank-s-2) from the
  // left into staging s%2, adds its own input, and sends it on at step s+1, so after size-1
  // steps staging (size-2)%2 holds this rank's slice summed over all ranks. When the sum is
  // written as it is, that staging is `out` itself.
  const int last = (size - 2) % 2;
  const bool direct = !how.accumulate && how.divisor == 1.0f;
  // One step receives into one staging while sending from the other: each its own buffer.
  std::vector<float> scratch((direct ? 1 : 2) * slice);
  std::vector<float> first_copy;  // the first send, when no single piece holds it
  auto own_scratch = context.createUnboundBuffer(scratch.data(), slice * sizeof(float));
  std::unique_ptr<gloo::transport::UnboundBuffer> last_buffer =
      direct ? context.createUnboundBuffer(out, count * sizeof(float))
             : context.createUnboundBuffer(scratch.data() + slice, slice * sizeof(float));
  Staging staging[2];
  staging[1 - last] = {own_scratch.get(), scratch.data(), 0};
  staging[last] = {last_buffer.get(), direct ? out : scratch.data() + slice, 0};

  for (size_t begin = 0; begin < count; begin += slice) {
    const size_t n = std::min(slice, count - begin);
    const size_t bytes = n * sizeof(float);
    if (direct) staging[last].offset = begin;
    // The first step sends this rank's slice of chunk rank-1 as it is.
    const size_t first_offset = chunk_offset(rank - 1) + begin;
    const float* first = input.contiguous(first_offset, n);
    if (first == nullptr) {
      first_copy.resize(slice);
      input.copy_to(first_offset, n, first_copy.data());
      first = first_copy.data();
    }
    // Gloo's buffers are untyped and mutable; this one is only sent from.
    auto first_buffer = context.createUnboundBuffer(const_cast<float*>(first), bytes);

    for (int step = 0; step < size - 1; ++step) {
      const Staging& into = staging[step % 2];
      const Staging& from = staging[(step + 1) % 2];
      into.buffer->recv(left, slot, into.offset * sizeof(float), bytes);
      if (step == 0) {
        first_buffer->send(right, slot, 0, bytes);
      } else {
        from.buffer->send(right, slot, from.offset * sizeof(float), bytes);
      }
      const std::string at_step =
          " (ring step " + std::to_string(step + 1) + " of " + std::to_string(size - 1) + ")";
      if (!into.buffer->waitRecv(
              time_left(deadline, timeout, "group rank " + std::to_string(left) + at_step))) {
        throw std::runtime_error("receive from group rank " + std::to_string(left) + " aborted");
      }
      gloo::transport::UnboundBuffer& sent = step == 0 ? *first_buffer : *from.buffer;
      if (!sent.waitSend(
              time_left(deadline, timeout, "group rank " + std::to_string(right) + at_step))) {
        throw std::runtime_error("send to group rank " + std::to_string(right) + " aborted");
      }
      input.add_to(chunk_offset(rank - step - 2) + begin, n, into.data());
    }
    finish(begin, n, staging[last].data());
  }
}

void ring_reduce_scatter(gloo::Context& context, const float* in, float* out, size_t count,
                         std::chrono::milliseconds timeout) {
  const size_t total = count * static_cast<size_t>(context.size);
  const std::vector<FloatPiece> pieces = {{0, total, in}};
  if (!overlaps(out, count, in, total)) {
    ring_reduce_scatter(context, pieces, out, count, RingReduce{}, timeout);
    return;
  }
  // The input is read until this rank's last slice; the result waits beside it.
  std::vector<float> result(count);
  ring_reduce_scatter(context, pieces, result.data(), count, RingReduce{}, timeout);
  std::memcpy(out, result.data(), count * sizeof(float));
}

}  // namespace mfsdp::executor
