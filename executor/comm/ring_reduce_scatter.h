#pragma once
// Reduce-scatter (sum) around a ring of Gloo peers. Gloo 0.5 offers none over unbound buffers,
// and an all-reduce followed by a slice would move twice the data: here every rank sends and
// receives size-1 chunks of `count` floats, (size-1)/size of its input.

#include <chrono>
#include <cstddef>

namespace gloo {
class Context;
}

namespace mfsdp::executor {

// in: context.size * count floats; out: count floats = sum over ranks of their chunk
// in[context.rank * count, +count). `out` may overlap `in`. Runs the whole collective within
// `timeout` or throws (std::exception from Gloo, or std::runtime_error on timeout).
// Every rank of the context must call it with the same count, in the same order.
void ring_reduce_scatter(gloo::Context& context, const float* in, float* out, size_t count,
                         std::chrono::milliseconds timeout);

}  // namespace mfsdp::executor
