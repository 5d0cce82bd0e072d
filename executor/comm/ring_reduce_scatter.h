#pragma once
// Reduce-scatter (sum) around a ring of Gloo peers. Gloo 0.5 offers none over unbound buffers,
// and an all-reduce followed by a slice would move twice the data: here every rank sends and
// receives size-1 chunks of `count` floats, (size-1)/size of its input.
//
// The input may be given in pieces (a group's parameter gradients, as autograd made them), so
// that no flat copy of a whole unit's gradient is needed, and the ring runs over slices of
// the chunks, so that its staging is a few slices instead of a chunk.

#include <chrono>
#include <cstddef>
#include <vector>

namespace gloo {
class Context;
}

namespace mfsdp::executor {

// Floats [offset, offset + count) of a reduce-scatter's input, at `data`.
struct FloatPiece {
  size_t offset = 0;
  size_t count = 0;
  const float* data = nullptr;
};

struct RingReduce {
  float divisor = 1.0f;            // each result is the sum divided by it (the group size: average)
  bool accumulate = false;         // add results into `out` instead of writing them
  size_t slice = size_t{1} << 20;  // floats of each chunk reduced per round trip
};

// in: context.size * count floats as pieces, sorted by offset and disjoint; floats that no
// piece covers are zero. out: count floats, this rank's chunk in[context.rank * count, +count)
// summed over ranks (then divided and written or added, as `how` says). Pieces must not
// overlap `out`. Runs the whole collective within `timeout` or throws (std::exception from
// Gloo, or std::runtime_error on timeout). Every rank of the context must call it with the
// same count and slice, in the same order; the pieces may differ.
void ring_reduce_scatter(gloo::Context& context, const std::vector<FloatPiece>& in, float* out,
                         size_t count, const RingReduce& how, std::chrono::milliseconds timeout);

// The same over one flat input of context.size * count floats, writing the plain sum. `out`
// may overlap `in`.
void ring_reduce_scatter(gloo::Context& context, const float* in, float* out, size_t count,
                         std::chrono::milliseconds timeout);

}  // namespace mfsdp::executor
