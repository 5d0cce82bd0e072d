// The memory breakdown `mfsdp run` prints and writes (docs/run.md#memory): what "other" is,
// the metrics record's round trip, and the table on CPUs and GPUs.
#include <gtest/gtest.h>

#include "executor/train/memory_report.h"

namespace mfsdp::executor {
namespace {

constexpr int64_t kMiB = 1 << 20;

MemoryBreakdown sample() {
  MemoryBreakdown m;
  m.rank = 1;
  m.runtime_base = 150 * kMiB;
  m.model_as_loaded = 400 * kMiB;
  m.setup_peak_rss = 900 * kMiB;
  m.sharded_params = 200 * kMiB;
  m.main_grads = 200 * kMiB;
  m.optimizer_state = 400 * kMiB;
  m.slots = 100 * kMiB;
  m.activation_peak = 300 * kMiB;
  m.optimizer_step_peak = 120 * kMiB;
  m.code = 20 * kMiB;
  m.cache = 6 * kMiB;
  m.heap_objects = 4 * kMiB;
  m.peak_rss = 1430 * kMiB;
  return m;
}

TEST(MemoryBreakdown, OtherIsThePeakLessTheBaseTheStateTheLargerTransientCacheCodeAndObjects) {
  MemoryBreakdown m = sample();
  EXPECT_EQ(m.transient(), 300 * kMiB);
  EXPECT_EQ(m.accounted(), (150 + 200 + 200 + 400 + 100 + 300 + 6 + 20 + 4) * kMiB);
  EXPECT_EQ(m.other(), 50 * kMiB);
  m.optimizer_step_peak = 350 * kMiB;  // the optimizer's temporaries are the larger now
  EXPECT_EQ(m.other(), 0);
  EXPECT_EQ(m.process_peak_rss(), 1430 * kMiB);
  m.setup_peak_rss = 1500 * kMiB;
  EXPECT_EQ(m.process_peak_rss(), 1500 * kMiB);
}

TEST(MemoryBreakdown, MetricsRecordRoundTripsAndCarriesOther) {
  const MemoryBreakdown m = sample();
  const nlohmann::json j = m.to_json();
  EXPECT_EQ(j.at("other_bytes").get<int64_t>(), 50 * kMiB);
  EXPECT_EQ(j.at("code_bytes").get<int64_t>(), 20 * kMiB);
  EXPECT_EQ(j.at("cache_bytes").get<int64_t>(), 6 * kMiB);
  EXPECT_EQ(j.at("heap_object_bytes").get<int64_t>(), 4 * kMiB);
  EXPECT_EQ(j.at("device").get<std::string>(), "cpu");
  EXPECT_EQ(MemoryBreakdown::from_json(j).to_json(), j);
}

TEST(MemoryBreakdown, CpuTableHasOneRowPerRankWithOtherAsAShareOfThePeakAboveTheBase) {
  MemoryBreakdown r0 = sample();
  r0.rank = 0;
  const std::string table = memory_table({r0, sample()});
  EXPECT_EQ(table.rfind("memory per rank, MiB (docs/run.md#memory):\n", 0), 0u) << table;
  EXPECT_NE(table.find("rank 0 "), std::string::npos) << table;
  EXPECT_NE(table.find("rank 1 "), std::string::npos) << table;
  // cache 6, code 20, objects 4 MiB; other 50 MiB of 1280 MiB above the base
  for (const char* column : {" cache ", " code ", " objects "}) {
    EXPECT_NE(table.find(column), std::string::npos) << table;
  }
  for (const char* value : {" 6.0", " 20.0", " 4.0", " 50.0", "3.9 %"}) {
    EXPECT_NE(table.find(value), std::string::npos) << table;
  }
}

TEST(MemoryBreakdown, GpuTableShowsDeviceColumnsAndNoOther) {
  MemoryBreakdown m = sample();
  m.device = "cuda";
  EXPECT_FALSE(m.to_json().contains("other_bytes"));
  const std::string table = memory_table({m});
  EXPECT_EQ(table.rfind("GPU memory per rank, MiB", 0), 0u) << table;
  EXPECT_EQ(table.find("other"), std::string::npos) << table;
  EXPECT_NE(table.find("1430.0"), std::string::npos) << table;  // the host's peak RSS
}

}  // namespace
}  // namespace mfsdp::executor
