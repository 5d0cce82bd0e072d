#include "executor/comm/nccl_communicator.h"

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "executor/runtime/timeline.h"
#include "gpu_gate.h"
#include "gpu_required.h"
#include "tests/executor/runtime/one_rank_world.h"
#include "text_match.h"

namespace mfsdp::executor {
namespace {

using namespace std::chrono_literals;

// A one-rank world with its rendezvous.
struct OneRankRendezvous : OneRankWorld {
  Rendezvous rendezvous{env, 30s};
};

std::string creation_error(const std::vector<NcclCommunicatorSpec>& specs) {
  OneRankRendezvous world;
  try {
    make_nccl_communicators(world.rendezvous, specs, 30s);
    return "created";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kInternal);
    return e.what();
  }
}

// The checks run before any CUDA or NCCL call, so they run without a GPU.
TEST(NcclCommunicators, RefuseGroupsAndNamesTheRendezvousWouldMismatch) {
  auto* no_stream = static_cast<CudaStream*>(nullptr);
  EXPECT_TRUE(contains(creation_error({{"control", {}, no_stream}}),
                       "rank 0: NCCL communicator 'control' over ranks {}: this rank is not a "
                       "member"));
  EXPECT_TRUE(contains(creation_error({{"control", {0, 1}, no_stream}}),
                       "the group must list distinct ranks of 0..0 in ascending order"));
  EXPECT_TRUE(contains(creation_error({{"control", {0}, no_stream}}), ": no stream"));
}

// Device memory holding floats, for a test.
struct DeviceFloats {
  explicit DeviceFloats(std::vector<float> values) : count(values.size()) {
    void* memory = nullptr;
    EXPECT_EQ(cudaMalloc(&memory, count * sizeof(float)), cudaSuccess);
    data = static_cast<float*>(memory);
    write(values);
  }
  ~DeviceFloats() { cudaFree(data); }
  void write(const std::vector<float>& values) {
    EXPECT_EQ(cudaMemcpy(data, values.data(), count * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<float> read() const {
    std::vector<float> host(count);
    EXPECT_EQ(cudaMemcpy(host.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
  float* data = nullptr;
  size_t count;
};

TEST(NcclCommunicatorOnGpu, OneRankCollectivesRoundTrip) {
  MFSDP_REQUIRE_GPU();
  OneRankRendezvous world;
  const CudaDevice device = CudaDevice::select(world.env, &world.rendezvous);
  CudaStream ag_stream("all_gather", device.index());
  CudaStream rs_stream("reduce_scatter", device.index());
  Timeline timeline;
  {
    auto comms = make_nccl_communicators(
        world.rendezvous,
        {{"all_gather.0", {0}, &ag_stream}, {"reduce_scatter.0", {0}, &rs_stream}}, 60s);
    ASSERT_EQ(comms.size(), 2u);
    NcclCommunicator& ag = *comms[0];
    NcclCommunicator& rs = *comms[1];
    EXPECT_EQ(ag.rank(), 0);
    EXPECT_EQ(ag.size(), 1);
    EXPECT_EQ(&ag.stream(), &ag_stream);
    ag.set_timeline(&timeline);

    const std::vector<float> values = {1.5f, -2.0f, 3.25f, 8.0f};
    const std::vector<float> poison(4, -99.0f);
    DeviceFloats in(values), gathered(poison), scattered(poison), summed(values);
    ag.all_gather(in.data, gathered.data, 4 * sizeof(float), "all-gather of u group 0");
    rs.reduce_scatter(in.data, scattered.data, 4, ReduceOp::kAvg, "reduce-scatter of u group 0");
    rs.all_reduce(summed.data, 4, ReduceOp::kSum, "all-reduce of u");
    ag_stream.synchronize();
    rs_stream.synchronize();
    EXPECT_EQ(gathered.read(), values);
    EXPECT_EQ(scattered.read(), values);
    EXPECT_EQ(summed.read(), values);
    EXPECT_EQ(in.read(), values);

    // bfloat16 with NCCL's own average: the bits of 1.0 and -2.0 survive a 1-rank average.
    std::vector<uint16_t> bf16 = {0x3f80, 0xc000};
    void* bf16_device = nullptr;
    ASSERT_EQ(cudaMalloc(&bf16_device, sizeof(uint16_t) * 2), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(bf16_device, bf16.data(), 4, cudaMemcpyHostToDevice), cudaSuccess);
    rs.all_reduce(bf16_device, 2, "bfloat16", ReduceOp::kAvg, "all-reduce of u in bf16");
    rs_stream.synchronize();
    std::vector<uint16_t> back(2);
    ASSERT_EQ(cudaMemcpy(back.data(), bf16_device, 4, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(bf16_device);
    EXPECT_EQ(back, bf16);
    EXPECT_FALSE(ag.failed());
  }
  // Destroying a communicator drains its watchdog, which records the spans it saw complete.
  const std::vector<TimelineSpan> spans = timeline.take();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].track, "all_gather");
  EXPECT_EQ(spans[0].name, "all-gather of u group 0");
  EXPECT_EQ(spans[0].bytes, 16);
  EXPECT_LE(spans[0].start_us, spans[0].end_us);
}

TEST(NcclCommunicatorOnGpu, StuckCollectiveTimesOutAndAbortsInsteadOfHanging) {
  MFSDP_REQUIRE_GPU();
  OneRankRendezvous world;
  const CudaDevice device = CudaDevice::select(world.env, &world.rendezvous);
  CudaStream stream("control", device.index());
  DeviceFloats data({1.0f, 2.0f});
  auto comms = make_nccl_communicators(world.rendezvous, {{"control", {0}, &stream}}, 300ms);
  NcclCommunicator& control = *comms[0];

  StreamGate gate(stream.native());  // the collective cannot finish until the gate opens
  control.all_reduce(data.data, 2, ReduceOp::kSum, "all-reduce of the loss");
  const auto done = stream.record();
  try {
    done->wait();  // returns when the watchdog reports the timeout, with the gate still shut
    FAIL() << "a stuck collective did not time out";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_TRUE(starts_with(e.what(),
                            "rank 0: all-reduce of the loss on control timed out after "
                            "300 ms; the communicator was aborted."));
  }
  EXPECT_TRUE(control.failed());
  EXPECT_TRUE(stream.failed());
  try {
    control.all_reduce(data.data, 2, ReduceOp::kSum, "all-reduce of the grad norm");
    FAIL() << "a failed communicator issued another collective";
  } catch (const Error& e) {
    EXPECT_TRUE(starts_with(e.what(),
                            "rank 0: all-reduce of the grad norm on control was not "
                            "issued: the communicator failed earlier: rank 0: "
                            "all-reduce of the loss on control timed out"));
  }
  gate.open();
  comms.clear();  // joins the watchdog after its abort
}

}  // namespace
}  // namespace mfsdp::executor
