#pragma once
// The reference compute that calibrates a predicted step (docs/predict.md#compute): the same
// kernel timed where the plan's trace ran (mfsdp plan --trace-input) and on the ranks
// (mfsdp probe), so that their ratio scales the trace's unit times to the ranks' machine, and
// the optimizer's time per element on a flat shard, as the executor's sharded optimizer steps
// it. No LibTorch types here.

#include <string>

namespace mfsdp::planner {

// float32 matmul throughput in GFLOP/s on `device` ("cpu" or "cuda"): square 384 x 384
// products, warmed up, then the median rate of 15 timed batches, with the intra-op threads
// this process has now. About 0.1-0.3 s on a CPU.
double reference_gflops(const std::string& device = "cpu");

// Seconds `count` of those matmuls take back to back on `device`, after one untimed; what
// mfsdp probe times with and without collectives running beside it.
double time_reference_matmuls(int count, const std::string& device = "cpu");

// Nanoseconds per element of one LibTorch optimizer step ("sgd" with momentum 0.9, "adam",
// "adamw") over one flat float32 tensor of 4 Mi elements with a gradient, on `device`: the
// median of 7 steps after 2 warm-up steps. Error(kUsage) for another optimizer name.
double optimizer_ns_per_element(const std::string& optimizer, const std::string& device = "cpu");

// Sets LibTorch's intra-op threads and, when the process's BLAS is OpenBLAS, OpenBLAS's too
// (it keeps a pool of its own, which at::set_num_threads does not size), so that a trace
// computes with the threads a rank will have. Returns the LibTorch count before.
int set_compute_threads(int threads);

}  // namespace mfsdp::planner
