#include "predict/profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schema/error.h"
#include "tests/planner/test_support.h"  // EXPECT_MFSDP_ERROR

namespace mfsdp::predict {
namespace {

TEST(ProfileFit, RecoversTheLatencyAndBandwidthOfExactPoints) {
  // t = 50 us + bytes / 1000 bytes per us, at 1 KiB .. 1 MiB.
  std::vector<ProfilePoint> points;
  for (int64_t bytes = 1024; bytes <= (1 << 20); bytes *= 4) {
    points.push_back({bytes, 50 + static_cast<double>(bytes) / 1000});
  }
  const CollectiveCost c = fit_collective(points);
  EXPECT_NEAR(c.latency_us, 50, 1e-6);
  EXPECT_NEAR(c.bytes_per_us, 1000, 1e-6);
  EXPECT_NEAR(c.time_us(1 << 20), 50 + 1048.576, 1e-6);
}

TEST(ProfileFit, ANegativeLatencyBecomesZeroWithTheBandwidthRefittedThroughTheOrigin) {
  // t = -5 + x / 100 through (1000, 5) and (2000, 15). Through the origin with weights 1/t^2:
  // b = (1000*5/25 + 2000*15/225) / (1000^2/25 + 2000^2/225) = 333.33 / 57777.8.
  const CollectiveCost c = fit_collective({{1000, 5}, {2000, 15}});
  EXPECT_EQ(c.latency_us, 0);
  EXPECT_NEAR(c.bytes_per_us, 57777.777777 / 333.333333, 1e-3);
}

TEST(ProfileFit, TimesThatDoNotGrowWithSizeFitALatencyAlone) {
  const CollectiveCost c = fit_collective({{1000, 20}, {4000, 20}, {16000, 19}});
  EXPECT_EQ(c.bytes_per_us, 0);
  EXPECT_GT(c.latency_us, 19);
  EXPECT_LT(c.latency_us, 20);
}

TEST(ProfileFit, NeedsTwoSizesAndPositiveTimes) {
  EXPECT_MFSDP_ERROR(fit_collective({{1000, 5}, {1000, 6}}), ExitCode::kUsage, "two or more sizes");
  EXPECT_MFSDP_ERROR(fit_collective({{1000, 5}, {2000, 0}}), ExitCode::kUsage, "time > 0");
}

Profile two_sizes() {
  Profile p;
  p.name = "test";
  p.backend = "gloo";
  p.device = "cpu";
  p.collectives.push_back({"all_gather", 2, {100, 1000}, {}});
  p.collectives.push_back({"all_gather", 8, {700, 4000}, {}});
  p.collectives.push_back({"reduce_scatter", 2, {30, 500}, {{1024, 32}, {4096, 38}}});
  return p;
}

TEST(ProfileCost, UsesAMeasuredWorldSizeAsIs) {
  std::string note;
  const CollectiveCost c = collective_cost(two_sizes(), "all_gather", 8, &note);
  EXPECT_EQ(c.latency_us, 700);
  EXPECT_EQ(c.bytes_per_us, 4000);
  EXPECT_EQ(note, "");
}

TEST(ProfileCost, ScalesAnotherWorldSizeByTheRingModel) {
  std::string note;
  // From 2 to 3: latency per hop 30 us x 2 hops; each rank moves 2/3 of the bytes instead
  // of 1/2 over the same links, so 500 x (1/2) / (2/3) bytes per us.
  const CollectiveCost c = collective_cost(two_sizes(), "reduce_scatter", 3, &note);
  EXPECT_DOUBLE_EQ(c.latency_us, 60);
  EXPECT_DOUBLE_EQ(c.bytes_per_us, 375);
  EXPECT_NE(note.find("ring model from 2"), std::string::npos) << note;
  // 4 is as far from 2 as from 8 (a factor 2): the larger is taken, 7 hops of 100 us.
  const CollectiveCost g = collective_cost(two_sizes(), "all_gather", 4, &note);
  EXPECT_DOUBLE_EQ(g.latency_us, 300);
  EXPECT_DOUBLE_EQ(g.bytes_per_us, 4000 * (7.0 / 8) / (3.0 / 4));
}

TEST(ProfileCost, OneRankCostsNothingAndAMissingKindIsNamed) {
  const CollectiveCost none = collective_cost(two_sizes(), "all_reduce", 1);
  EXPECT_EQ(none.time_us(1 << 30), 0);
  EXPECT_MFSDP_ERROR(collective_cost(two_sizes(), "all_reduce", 2), ExitCode::kUsage,
                     "profile 'test' has no all_reduce");
}

TEST(ProfileJson, RoundTripsEveryField) {
  Profile p = two_sizes();
  p.description = "two sizes";
  p.threads_per_rank = 1;
  p.compute.reference_gflops = 85.5;
  p.compute.optimizer_ns_per_element = {{"adamw", 3.25}, {"sgd", 1.5}};
  p.compute.contention = 0.75;
  const Profile back = parse_profile(nlohmann::json::parse(profile_text(p)));
  EXPECT_EQ(profile_text(back), profile_text(p));
  EXPECT_EQ(back.collectives[2].points.size(), 2u);
  EXPECT_EQ(*back.compute.reference_gflops, 85.5);
  EXPECT_EQ(back.compute.optimizer_ns_per_element.at("adamw"), 3.25);
  EXPECT_EQ(*back.compute.contention, 0.75);
}

// compute.rates (an analytic device): read back as written; every field checked by name.
TEST(ProfileJson, RoundTripsAndChecksComputeRates) {
  Profile p = two_sizes();
  ComputeRates r;
  r.tflops = {{"bfloat16", 989.4}, {"float32", 66.9}};
  r.memory_gbps = 3350;
  r.matmul = {0.75, 10};
  r.attention = {0.45, 15};
  r.elementwise = {0.8, 3};
  r.embedding = {0.5, 5};
  p.compute.rates = r;
  const nlohmann::json doc = nlohmann::json::parse(profile_text(p));
  const Profile back = parse_profile(doc);
  EXPECT_EQ(profile_text(back), profile_text(p));
  ASSERT_TRUE(back.compute.rates.has_value());
  EXPECT_EQ(back.compute.rates->tflops.at("bfloat16"), 989.4);
  EXPECT_EQ(back.compute.rates->attention.op_us, 15);

  const auto refused = [&](const char* pointer, const nlohmann::json& value, const char* what) {
    nlohmann::json bad = doc;
    if (value.is_null()) {
      bad.at(nlohmann::json::json_pointer(pointer).parent_pointer())
          .erase(nlohmann::json::json_pointer(pointer).back());
    } else {
      bad[nlohmann::json::json_pointer(pointer)] = value;
    }
    EXPECT_MFSDP_ERROR(parse_profile(bad), ExitCode::kUsage, what);
  };
  refused("/compute/rates/matmul/efficiency", 1.5,
          "compute.rates.matmul.efficiency: must be in (0, 1], a share of the peak");
  refused("/compute/rates/tflops/bfloat16", 0, "compute.rates.tflops.bfloat16: must be > 0");
  refused("/compute/rates/tflops", nlohmann::json::object(), "compute.rates.tflops: has no dtype");
  refused("/compute/rates/embedding", nullptr, "compute.rates.embedding: is missing");
  refused("/compute/rates/memory_gbps", -1, "compute.rates.memory_gbps: must be a finite number");
  refused("/compute/rates/elementwise/launch_us", 2,
          "compute.rates.elementwise.launch_us: is not a profile field");
}

// A profile fitted to a run (`mfsdp show --calibrate`): every collective slower by one
// factor, compute by the other, both recorded; a second calibration composes with the first.
TEST(ProfileCalibration, ScalesTheCollectivesAndComputeAndRecordsTheFactors) {
  ProfileCalibration c{"gpt.plan.json", "m.jsonl", 1.25, 2};
  const Profile once = calibrated_profile(two_sizes(), c);
  EXPECT_EQ(once.collectives[0].cost.latency_us, 200);
  EXPECT_EQ(once.collectives[0].cost.bytes_per_us, 500);
  EXPECT_EQ(once.collectives[2].points[1].us, 76);
  EXPECT_EQ(*once.compute.run_factor, 1.25);
  // Any size costs twice what it did.
  EXPECT_DOUBLE_EQ(once.collectives[1].cost.time_us(123456),
                   2 * two_sizes().collectives[1].cost.time_us(123456));
  const Profile twice = calibrated_profile(once, {"gpt.plan.json", "m2.jsonl", 2, 0.5});
  EXPECT_EQ(twice.collectives[0].cost.latency_us, 100);
  EXPECT_EQ(*twice.compute.run_factor, 2.5);
  EXPECT_EQ(twice.calibration->metrics, "m2.jsonl");
  EXPECT_EQ(twice.calibration->compute_factor, 2.5);
  EXPECT_EQ(twice.calibration->collective_factor, 1);
  const Profile back = parse_profile(nlohmann::json::parse(profile_text(once)));
  EXPECT_EQ(profile_text(back), profile_text(once));
  EXPECT_EQ(back.calibration->plan, "gpt.plan.json");
  EXPECT_MFSDP_ERROR(calibrated_profile(two_sizes(), {"p", "m", 0, 1}), ExitCode::kUsage,
                     "a calibration factor must be a finite number > 0");
  nlohmann::json doc = nlohmann::json::parse(profile_text(once));
  doc["compute"]["run_factor"] = 0;
  EXPECT_MFSDP_ERROR(parse_profile(doc), ExitCode::kUsage, "compute.run_factor: must be > 0");
}

TEST(ProfileJson, RefusesWhatItDoesNotKnowNamingTheField) {
  nlohmann::json doc = nlohmann::json::parse(profile_text(two_sizes()));
  nlohmann::json extra = doc;
  extra["collectives"][1]["latency"] = 3;
  EXPECT_MFSDP_ERROR(parse_profile(extra), ExitCode::kUsage,
                     "collectives[1].latency: is not a profile field");
  nlohmann::json negative = doc;
  negative["collectives"][0]["bytes_per_us"] = -1;
  EXPECT_MFSDP_ERROR(parse_profile(negative), ExitCode::kUsage,
                     "collectives[0].bytes_per_us: must be a finite number >= 0");
  nlohmann::json twice = doc;
  twice["collectives"][1]["world_size"] = 2;
  EXPECT_MFSDP_ERROR(parse_profile(twice), ExitCode::kUsage, "a second all_gather at world size 2");
  nlohmann::json version = doc;
  version["schema"] = "mfsdp.profile/2";
  EXPECT_MFSDP_ERROR(parse_profile(version), ExitCode::kUsage, "reads that version only");
  nlohmann::json kind = doc;
  kind["collectives"][0]["kind"] = "broadcast";
  EXPECT_MFSDP_ERROR(parse_profile(kind), ExitCode::kUsage, "'broadcast' is not all_gather");
}

TEST(ProfileBuiltin, EveryNameLoadsAndStatesItsSource) {
  for (const std::string& name : builtin_profile_names()) {
    const Profile p = load_profile(name);
    EXPECT_EQ(p.name, name);
    EXPECT_NE(p.description.find("calibrate with mfsdp probe"), std::string::npos) << name;
    // Every kind is there, and survives its own format.
    for (const char* kind : {"all_gather", "reduce_scatter", "all_reduce"}) {
      EXPECT_GT(collective_cost(p, kind, 8).bytes_per_us, 0) << name << " " << kind;
    }
    EXPECT_EQ(profile_text(parse_profile(nlohmann::json::parse(profile_text(p)))), profile_text(p));
  }
  // An 8-GPU NVLink all-gather of 1 GiB: each GPU receives 7/8 of it at 360 GB/s of bus
  // bandwidth, 2.61 ms, plus 15 us.
  const CollectiveCost h100 = collective_cost(load_profile("h100-nvlink"), "all_gather", 8);
  EXPECT_NEAR(h100.time_us(int64_t{1} << 30), 15 + (1 << 30) * (7.0 / 8) / 360e3, 1e-6);
  // Over 4 nodes' rails: a shard group's all-gather at the 8 ports' 320 GB/s, 62 us of hops;
  // HSDP's replica all-reduce (one GPU per node) on one port, 40 GB/s, twice the data.
  const Profile ib = load_profile("ib-400g");
  EXPECT_NEAR(collective_cost(ib, "all_gather", 32).time_us(int64_t{1} << 30),
              62 + (1 << 30) * (31.0 / 32) / 320e3, 1e-6);
  EXPECT_NEAR(collective_cost(ib, "all_reduce", 32).time_us(int64_t{1} << 30),
              124 + 2.0 * (1 << 30) * (31.0 / 32) / 40e3, 1e-6);
}

TEST(ProfileBuiltin, AnUnknownNameOrFileSaysWhatExists) {
  EXPECT_MFSDP_ERROR(load_profile("/nonexistent/p.json"), ExitCode::kUsage,
                     "neither a profile file nor a built-in profile (a100-nvlink, h100-nvlink, "
                     "h200-nvlink, b200-nvlink, ib-400g)");
}

// Every built-in GPU profile times a meta trace: the datasheet's dense peaks (docs/predict.md
// cites them) at one set of efficiencies.
TEST(ProfileBuiltin, EveryGpuProfileHasItsDatasheetsComputeRates) {
  const std::map<std::string, std::vector<double>> sheets = {
      // bfloat16 TFLOP/s, float32 TFLOP/s, HBM GB/s
      {"a100-nvlink", {312, 19.5, 2039}},
      {"h100-nvlink", {989.4, 66.9, 3350}},
      {"h200-nvlink", {989.4, 66.9, 4800}},
      {"b200-nvlink", {2250, 80, 8000}},
      {"ib-400g", {989.4, 66.9, 3350}}};
  for (const std::string& name : builtin_profile_names()) {
    SCOPED_TRACE(name);
    const Profile p = load_profile(name);
    ASSERT_TRUE(p.compute.rates.has_value());
    const std::vector<double>& sheet = sheets.at(name);
    EXPECT_EQ(p.compute.rates->tflops.at("bfloat16"), sheet[0]);
    EXPECT_EQ(p.compute.rates->tflops.at("float16"), sheet[0]);
    EXPECT_EQ(p.compute.rates->tflops.at("float32"), sheet[1]);
    EXPECT_EQ(p.compute.rates->memory_gbps, sheet[2]);
    EXPECT_EQ(p.compute.rates->matmul.efficiency, 0.75);
  }
  // An 8192 x 8192 x 8192 bfloat16 product on an H100: 1.1 TFLOP at 75 % of 989.4 TFLOP/s,
  // 1.48 ms, plus its 10 µs.
  const ComputeRates h100 = *load_profile("h100-nvlink").compute.rates;
  const int64_t n = 8192;
  const schema::ClassWork product{2 * n * n * n, 3 * n * n * 2, 1};
  EXPECT_NEAR(matmul_us(product, h100, h100.matmul, "bfloat16"),
              10 + 2.0 * n * n * n / (0.75 * 989.4e6), 1e-6);
}

}  // namespace
}  // namespace mfsdp::predict
