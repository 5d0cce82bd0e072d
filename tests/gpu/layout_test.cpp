// Stream and slot layouts: plain functions of the plan, the same on CPU and GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "executor/runtime/cuda_slots.h"
#include "executor/runtime/stream_layout.h"
#include "gpu_required.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

schema::Mesh mesh(int world, int replicas) {
  schema::Mesh m;
  m.world_size = world;
  m.replicate_size = replicas;
  m.shard_size = world / replicas;
  return m;
}

using Groups = std::vector<std::vector<int>>;

Groups groups_of(const StreamLayout& layout) {
  Groups groups;
  for (const auto& c : layout.communicators) groups.push_back(c.group);
  return groups;
}

std::vector<std::string> names_of(const StreamLayout& layout, bool streams) {
  std::vector<std::string> names;
  for (const auto& c : layout.communicators) names.push_back(streams ? c.stream : c.name);
  return names;
}

TEST(StreamLayout, FsdpHasTwoCollectiveStreamsAndControl) {
  const StreamLayout layout = stream_layout(mesh(2, 1), schema::Policy{}, 1);
  EXPECT_EQ(layout.streams, (std::vector<std::string>{"all_gather", "reduce_scatter", "control"}));
  EXPECT_EQ(layout.reduce_stream, "reduce_scatter");
  EXPECT_EQ(names_of(layout, false),
            (std::vector<std::string>{"all_gather.0", "reduce_scatter.0", "control"}));
  EXPECT_EQ(names_of(layout, true),
            (std::vector<std::string>{"all_gather", "reduce_scatter", "control"}));
  EXPECT_EQ(groups_of(layout), (Groups{{0, 1}, {0, 1}, {0, 1}}));
}

TEST(StreamLayout, HsdpAddsTheReplicaGroupOnTheReduceStream) {
  const StreamLayout layout = stream_layout(mesh(4, 2), schema::Policy{}, 3);
  EXPECT_EQ(names_of(layout, false), (std::vector<std::string>{"all_gather.1", "reduce_scatter.1",
                                                               "replicas.1", "control"}));
  EXPECT_EQ(names_of(layout, true), (std::vector<std::string>{"all_gather", "reduce_scatter",
                                                              "reduce_scatter", "control"}));
  EXPECT_EQ(groups_of(layout), (Groups{{2, 3}, {2, 3}, {1, 3}, {0, 1, 2, 3}}));
}

TEST(StreamLayout, UnifiedStreamCarriesBothCollectives) {
  schema::Policy policy;
  policy.unified_stream = true;
  const StreamLayout layout = stream_layout(mesh(2, 1), policy, 0);
  EXPECT_EQ(layout.streams, (std::vector<std::string>{"unified", "control"}));
  EXPECT_EQ(layout.reduce_stream, "unified");
  EXPECT_EQ(names_of(layout, true), (std::vector<std::string>{"unified", "unified", "control"}));
}

TEST(StreamLayout, RankOutsideTheMeshIsInternal) {
  try {
    stream_layout(mesh(2, 1), schema::Policy{}, 2);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kInternal);
  }
}

schema::Memory memory(std::vector<std::pair<int64_t, int64_t>> index_and_bytes) {
  schema::Memory m;
  for (const auto& [index, bytes] : index_and_bytes) m.slots.push_back({index, bytes, {}});
  return m;
}

TEST(SlotLayout, SlotsStartAtDeviceAlignedOffsetsInIndexOrder) {
  const SlotLayout layout = plan_slot_layout(memory({{1, 0}, {0, 100}, {2, 300}}), 16);
  EXPECT_EQ(layout.alignment, 256);
  EXPECT_EQ(layout.offsets, (std::vector<int64_t>{0, 256, 256}));
  EXPECT_EQ(layout.bytes, (std::vector<int64_t>{100, 0, 300}));
  EXPECT_EQ(layout.total_bytes, 768);
}

TEST(SlotLayout, ALargerPlanAlignmentWins) {
  const SlotLayout layout = plan_slot_layout(memory({{0, 1}, {1, 1}}), 4096);
  EXPECT_EQ(layout.alignment, 4096);
  EXPECT_EQ(layout.offsets, (std::vector<int64_t>{0, 4096}));
  EXPECT_EQ(layout.total_bytes, 8192);
}

TEST(SlotLayout, NoSlotsNeedNoMemory) {
  const SlotLayout layout = plan_slot_layout(schema::Memory{}, 16);
  EXPECT_TRUE(layout.offsets.empty());
  EXPECT_EQ(layout.total_bytes, 0);
}

TEST(SlotLayout, RefusesBrokenPlans) {
  for (const auto& [slots, align] :
       std::vector<std::pair<schema::Memory, int64_t>>{{memory({{0, 8}, {0, 8}}), 16},
                                                       {memory({{1, 8}}), 16},
                                                       {memory({{0, -8}}), 16},
                                                       {memory({{0, 8}}), 24},
                                                       {memory({{0, 8}}), 0}}) {
    try {
      plan_slot_layout(slots, align);
      FAIL() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage) << e.what();
    }
  }
}

TEST(CudaSlotsOnGpu, OneAllocationWithEachSlotAtItsOffset) {
  MFSDP_REQUIRE_GPU();
  CudaSlots slots(memory({{0, 100}, {1, 4000}, {2, 0}}), 16, 0, 0);
  ASSERT_EQ(slots.count(), 3);
  auto* base = static_cast<char*>(slots.data(0));
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % 256, 0u);
  EXPECT_EQ(static_cast<char*>(slots.data(1)) - base, 256);
  EXPECT_EQ(slots.bytes(1), 4000);
  // The whole allocation is usable device memory.
  EXPECT_EQ(cudaMemset(base, 0x5a, static_cast<size_t>(slots.layout().total_bytes)), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_THROW(slots.data(3), Error);
}

}  // namespace
}  // namespace mfsdp::executor
