#include "executor/runtime/cuda_event_pool.h"

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include "gpu_required.h"

namespace mfsdp::executor {
namespace {

TEST(CudaEventPoolOnGpu, ReusesEventsGivenBackAndGrowsOnlyWhenEmpty) {
  MFSDP_REQUIRE_GPU();
  CudaEventPool pool(0, 2, "a test");
  EXPECT_EQ(pool.created(), 2);
  cudaEvent_t a = pool.take(), b = pool.take();
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.created(), 2);
  cudaEvent_t c = pool.take();  // none spare: a new one
  EXPECT_EQ(pool.created(), 3);
  pool.give(a);
  EXPECT_EQ(pool.take(), a);
  EXPECT_EQ(pool.created(), 3);
  // A taken event works as any event: record, then it completes.
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(c, stream), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(c), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(c), cudaSuccess);
  cudaStreamDestroy(stream);
  for (cudaEvent_t e : {a, b, c}) pool.give(e);
}

}  // namespace
}  // namespace mfsdp::executor
