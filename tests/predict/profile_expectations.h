#pragma once
// What every profile mfsdp probe writes holds, whichever backend measured it: the three
// collectives at the probed world size with a point per size, and the compute figures.
// Shared by the probe's CLI test (Gloo) and its GPU test (NCCL).

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "predict/profile.h"

namespace mfsdp::testing {

inline void expect_probed_collectives_and_compute(const predict::Profile& profile, int64_t world,
                                                  const std::vector<int64_t>& sizes) {
  ASSERT_EQ(profile.collectives.size(), 3u);
  const std::vector<std::string> kinds = {"all_gather", "reduce_scatter", "all_reduce"};
  for (size_t i = 0; i < kinds.size(); ++i) {
    const predict::CollectiveProfile& c = profile.collectives[i];
    EXPECT_EQ(c.kind, kinds[i]);
    EXPECT_EQ(c.world_size, world);
    EXPECT_GE(c.cost.latency_us, 0) << c.kind;
    EXPECT_GE(c.cost.bytes_per_us, 0) << c.kind;
    ASSERT_EQ(c.points.size(), sizes.size()) << c.kind;
    for (size_t p = 0; p < sizes.size(); ++p) {
      EXPECT_EQ(c.points[p].bytes, sizes[p]) << c.kind;
      EXPECT_GT(c.points[p].us, 0) << c.kind;
    }
  }
  ASSERT_TRUE(profile.compute.reference_gflops.has_value());
  EXPECT_GT(*profile.compute.reference_gflops, 0);
  for (const char* optimizer : {"sgd", "adam", "adamw"}) {
    ASSERT_EQ(profile.compute.optimizer_ns_per_element.count(optimizer), 1u) << optimizer;
    EXPECT_GT(profile.compute.optimizer_ns_per_element.at(optimizer), 0) << optimizer;
  }
  ASSERT_TRUE(profile.compute.contention.has_value());
  EXPECT_GE(*profile.compute.contention, 0);
  EXPECT_LE(*profile.compute.contention, 4);
}

}  // namespace mfsdp::testing
