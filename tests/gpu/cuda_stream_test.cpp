#include "executor/runtime/cuda_stream.h"

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "executor/runtime/cuda_error.h"
#include "gpu_gate.h"
#include "gpu_required.h"
#include "text_match.h"

namespace mfsdp::executor {
namespace {

// Device memory for a test, freed at the end.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : bytes(bytes) {
    EXPECT_EQ(cudaMalloc(&data, bytes), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data); }
  std::vector<unsigned char> read() const {
    std::vector<unsigned char> host(bytes);
    EXPECT_EQ(cudaMemcpy(host.data(), data, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  void* data = nullptr;
  size_t bytes;
};

// The race amplifier's variable: microseconds from 0 to 60 s, anything else refused by name.
TEST(DebugStreamDelay, ParsesMicrosecondsAndRefusesTheRest) {
  using std::chrono::microseconds;
  EXPECT_EQ(parse_debug_stream_delay(nullptr), microseconds(0));
  EXPECT_EQ(parse_debug_stream_delay(""), microseconds(0));
  EXPECT_EQ(parse_debug_stream_delay("2500"), microseconds(2500));
  EXPECT_EQ(parse_debug_stream_delay("60000000"), microseconds(60000000));
  for (const char* bad : {"-1", "2ms", "1e3", "60000001", "99999999999999999999"}) {
    try {
      parse_debug_stream_delay(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_TRUE(contains(e.what(), std::string("MFSDP_DEBUG_STREAM_DELAY_US=") + bad +
                                         " is not a delay in microseconds"));
    }
  }
  // Set and restored; no delay issues nothing, so no stream is needed.
  const microseconds before = debug_stream_delay();
  set_debug_stream_delay(microseconds(1500));
  EXPECT_EQ(debug_stream_delay(), microseconds(1500));
  set_debug_stream_delay(microseconds(0));
  delay_stream_for_debugging(nullptr);
  set_debug_stream_delay(before);
}

TEST(CudaStreamOnGpu, EventOrdersWorkAcrossStreams) {
  MFSDP_REQUIRE_GPU();
  CudaStream producer("producer", 0);
  CudaStream consumer("consumer", 0);
  DeviceBuffer source(1 << 20), copy(1 << 20);
  ASSERT_EQ(cudaMemset(source.data, 0, source.bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(copy.data, 0, copy.bytes), cudaSuccess);

  StreamGate gate(producer.native());
  ASSERT_EQ(cudaMemsetAsync(source.data, 0x7e, source.bytes, producer.native()), cudaSuccess);
  const auto produced = producer.record();
  consumer.wait_for(produced);
  ASSERT_EQ(cudaMemcpyAsync(copy.data, source.data, copy.bytes, cudaMemcpyDeviceToDevice,
                            consumer.native()),
            cudaSuccess);
  const auto consumed = consumer.record();
  EXPECT_FALSE(produced->done());
  EXPECT_FALSE(consumed->done());  // held back by the producer's gate

  gate.open();
  consumed->wait();
  EXPECT_TRUE(produced->done());
  EXPECT_EQ(copy.read(), std::vector<unsigned char>(copy.bytes, 0x7e));
}

// Polling work in flight must not leave cudaErrorNotReady as the thread's last error, where
// a later launch check would report it as a failure.
TEST(CudaStreamOnGpu, PollingUnfinishedWorkLeavesNoStaleError) {
  MFSDP_REQUIRE_GPU();
  CudaStream stream("all_gather", 0);
  StreamGate gate(stream.native());
  const auto pending = stream.record();
  cudaGetLastError();
  EXPECT_FALSE(pending->done());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, stream.native()), cudaSuccess);
  EXPECT_EQ(query_event(event), cudaErrorNotReady);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  gate.open();
  pending->wait();
  EXPECT_EQ(cudaEventSynchronize(event), cudaSuccess);
  EXPECT_EQ(query_event(event), cudaSuccess);
  cudaEventDestroy(event);
}

TEST(CudaStreamOnGpu, FailureFailsLaterEventsAndWaitingStreamsOnly) {
  MFSDP_REQUIRE_GPU();
  CudaStream failing("all_gather", 0);
  CudaStream waiting("compute", 0);
  CudaStream bystander("control", 0);
  const auto before = failing.record();
  waiting.wait_for(failing.record());  // waits for work that fails below, reported later
  const uint64_t work = failing.note_work();
  const auto after = failing.record();
  failing.fail(work, ExitCode::kRuntime, "rank 0: all-gather of u on all_gather.0 failed: x");

  EXPECT_NO_THROW(before->wait());  // its work came before the failure
  try {
    after->wait();
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_EQ(std::string(e.what()), "rank 0: all-gather of u on all_gather.0 failed: x");
  }
  EXPECT_TRUE(failing.failed());
  // `waiting` waited for an event recorded before the failed work: unaffected.
  EXPECT_FALSE(waiting.failed());
  waiting.wait_for(after);  // already failed: fails at once
  EXPECT_TRUE(waiting.failed());
  EXPECT_THROW(waiting.synchronize(), Error);
  EXPECT_NO_THROW(bystander.synchronize());
}

TEST(CudaStreamOnGpu, LaterFailureReachesStreamsThatWaitedForIt) {
  MFSDP_REQUIRE_GPU();
  CudaStream failing("reduce_scatter", 0);
  CudaStream waiting("compute", 0);
  const uint64_t work = failing.note_work();
  waiting.wait_for(failing.record());
  const auto waiter_event = waiting.record();
  failing.fail(work, ExitCode::kRuntime, "reduce-scatter failed");
  EXPECT_TRUE(waiting.failed());
  try {
    waiter_event->wait();
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "reduce-scatter failed");
  }
}

TEST(CudaStreamOnGpu, BorrowedStreamTakesPartInOrderingAndOutlivesItsWrapper) {
  MFSDP_REQUIRE_GPU();
  cudaStream_t raw = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), cudaSuccess);
  DeviceBuffer buffer(4096);
  {
    CudaStream compute("compute", 0, raw);
    CudaStream gather("all_gather", 0);
    EXPECT_EQ(compute.native(), raw);
    StreamGate gate(gather.native());
    ASSERT_EQ(cudaMemsetAsync(buffer.data, 0x11, buffer.bytes, gather.native()), cudaSuccess);
    compute.wait_for(gather.record());
    ASSERT_EQ(cudaMemsetAsync(buffer.data, 0x22, 16, raw), cudaSuccess);  // after the gather's
    gate.open();
    compute.synchronize();
  }
  std::vector<unsigned char> expected(buffer.bytes, 0x11);
  std::fill(expected.begin(), expected.begin() + 16, 0x22);
  EXPECT_EQ(buffer.read(), expected);
  EXPECT_EQ(cudaStreamSynchronize(raw), cudaSuccess);  // still a valid stream
  EXPECT_EQ(cudaStreamDestroy(raw), cudaSuccess);
}

TEST(CudaStreamOnGpu, RefusesHostWorkAndCpuEvents) {
  MFSDP_REQUIRE_GPU();
  CudaStream stream("all_gather", 0);
  try {
    stream.enqueue([] {}, "accumulating a gradient");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kInternal);
    EXPECT_TRUE(starts_with(e.what(),
                            "stream 'all_gather' is a CUDA stream and runs device work "
                            "only, but was given host work: accumulating a gradient"));
  }
  struct CpuEvent final : Event {
    void wait() override {}
    bool done() const override { return true; }
  };
  EXPECT_THROW(stream.wait_for(std::make_shared<CpuEvent>()), Error);
  EXPECT_EQ(stream.device(), 0);
  EXPECT_EQ(stream.name(), "all_gather");
}

}  // namespace
}  // namespace mfsdp::executor
