#include "executor/comm/nccl_error.h"

#include <gtest/gtest.h>

#include "executor/runtime/cuda_error.h"
#include "text_match.h"

namespace mfsdp::executor {
namespace {

using namespace std::chrono_literals;

TEST(NcclError, ResultTextHasNameAndNcclsText) {
  EXPECT_EQ(nccl_result_text(ncclRemoteError),
            "ncclRemoteError (remote process exited or there was a network error)");
  EXPECT_TRUE(starts_with(nccl_result_text(ncclSystemError), "ncclSystemError (unhandled system"));
  EXPECT_TRUE(starts_with(nccl_result_text(static_cast<ncclResult_t>(42)), "ncclResult 42 ("));
}

TEST(NcclError, MisuseIsInternalEverythingElseRuntime) {
  EXPECT_EQ(nccl_exit_code(ncclInvalidArgument), ExitCode::kInternal);
  EXPECT_EQ(nccl_exit_code(ncclInvalidUsage), ExitCode::kInternal);
  for (ncclResult_t r :
       {ncclUnhandledCudaError, ncclSystemError, ncclInternalError, ncclRemoteError}) {
    EXPECT_EQ(nccl_exit_code(r), ExitCode::kRuntime) << nccl_result_text(r);
  }
}

TEST(NcclError, FailureMessageNamesRankCollectiveCommunicatorAndBothResults) {
  NcclFailure f;
  f.rank = 3;
  f.communicator = "all_gather.0";
  f.what = "all-gather of layers.3 group 0";
  f.result = ncclSystemError;
  f.async_error = ncclRemoteError;
  f.last_error = "socket closed by peer";
  EXPECT_EQ(nccl_failure_message(f),
            "rank 3: all-gather of layers.3 group 0 on all_gather.0 failed: " +
                nccl_result_text(ncclSystemError) +
                "; async error: " + nccl_result_text(ncclRemoteError) +
                "; NCCL: socket closed by peer; a system call or the network failed; check "
                "NCCL_SOCKET_IFNAME");
  EXPECT_EQ(nccl_failure_code(f), ExitCode::kRuntime);
}

TEST(NcclError, AsynchronousFailureIsNamedByItsAsyncError) {
  NcclFailure f;
  f.rank = 1;
  f.communicator = "reduce_scatter.0";
  f.what = "reduce-scatter of <root> group 0";
  f.async_error = ncclRemoteError;
  EXPECT_EQ(nccl_failure_message(f),
            "rank 1: reduce-scatter of <root> group 0 on reduce_scatter.0 failed: async error: " +
                nccl_result_text(ncclRemoteError) +
                "; another rank failed or its connection broke; the first error on the other "
                "ranks says why");
  f.async_error = ncclInvalidUsage;
  EXPECT_EQ(nccl_failure_code(f), ExitCode::kInternal);
}

TEST(NcclError, TimeoutMessageSaysWhatTimedOutAndThatItWasAborted) {
  EXPECT_TRUE(starts_with(nccl_timeout_message(2, "control", "all-reduce of the loss", 5000ms),
                          "rank 2: all-reduce of the loss on control timed out after 5000 ms; the "
                          "communicator was aborted. "));
}

TEST(NcclError, WatchdogVerdicts) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + 10s;
  EXPECT_EQ(judge_in_flight(ncclSuccess, cudaErrorNotReady, t0, deadline), WorkVerdict::kRunning);
  EXPECT_EQ(judge_in_flight(ncclInProgress, cudaErrorNotReady, t0, deadline),
            WorkVerdict::kRunning);
  EXPECT_EQ(judge_in_flight(ncclSuccess, cudaSuccess, t0, deadline), WorkVerdict::kDone);
  EXPECT_EQ(judge_in_flight(ncclSuccess, cudaSuccess, deadline + 1s, deadline),
            WorkVerdict::kDone);  // finished; only noticed late
  EXPECT_EQ(judge_in_flight(ncclSuccess, cudaErrorNotReady, deadline, deadline),
            WorkVerdict::kTimedOut);
  // An error wins over completion: aborted collectives complete too.
  EXPECT_EQ(judge_in_flight(ncclRemoteError, cudaSuccess, t0, deadline), WorkVerdict::kFailed);
  EXPECT_EQ(judge_in_flight(ncclSuccess, cudaErrorIllegalAddress, t0, deadline),
            WorkVerdict::kFailed);
}

TEST(CudaError, TextHasNameAndDescription) {
  EXPECT_TRUE(starts_with(cuda_error_text(cudaErrorNoDevice), "cudaErrorNoDevice ("));
  EXPECT_TRUE(contains(cuda_error_text(cudaErrorMemoryAllocation), "out of memory"));
}

TEST(CudaError, BadArgumentsAreInternalDeviceTroubleIsRuntime) {
  EXPECT_EQ(cuda_exit_code(cudaErrorInvalidValue), ExitCode::kInternal);
  EXPECT_EQ(cuda_exit_code(cudaErrorInvalidResourceHandle), ExitCode::kInternal);
  EXPECT_EQ(cuda_exit_code(cudaErrorNoDevice), ExitCode::kRuntime);
  EXPECT_EQ(cuda_exit_code(cudaErrorMemoryAllocation), ExitCode::kRuntime);
  EXPECT_EQ(cuda_exit_code(cudaErrorIllegalAddress), ExitCode::kRuntime);
}

TEST(CudaError, CheckThrowsWithWhatWasBeingDoneAndAHint) {
  EXPECT_NO_THROW(check_cuda(cudaSuccess, "anything"));
  try {
    check_cuda(cudaErrorMemoryAllocation, "rank 0: allocating slots");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_EQ(std::string(e.what()),
              "rank 0: allocating slots failed: " + cuda_error_text(cudaErrorMemoryAllocation) +
                  "; the GPU is out of memory; re-plan with a smaller --resident-budget or fewer "
                  "ranks per GPU");
  }
}

}  // namespace
}  // namespace mfsdp::executor
