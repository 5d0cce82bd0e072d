#pragma once
// A machine's profile for predicting a plan's step (docs/predict.md#profiles): what each
// collective costs at a world size, fitted as latency plus bytes over bandwidth from measured
// points, and the compute figures that scale a trace's times to the ranks (the throughput of a
// reference matmul, the optimizer's time per element). `mfsdp probe` measures one; a few
// built-in profiles describe common clusters from published figures. No LibTorch here.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "predict/compute_rates.h"
#include "predict/simulate.h"

namespace mfsdp::predict {

inline constexpr const char* kProfileSchemaVersion = "mfsdp.profile/1";

// One measured size: the collective's unsharded bytes (all-gather output, reduce-scatter
// input, all-reduce buffer) and its median time.
struct ProfilePoint {
  int64_t bytes = 0;
  double us = 0;
};

// One collective kind at one group size: the fit and the points it was fitted to (none in
// a built-in profile).
struct CollectiveProfile {
  std::string kind;  // "all_gather" | "reduce_scatter" | "all_reduce"
  int64_t world_size = 2;
  CollectiveCost cost;
  std::vector<ProfilePoint> points;
};

struct ComputeProfile {
  // float32 matmul throughput of one rank while every rank computes, GFLOP/s
  // (planner/torchscript/reference_compute.h). The plan's trace measured the same kernel,
  // so their ratio scales the trace's times to the ranks.
  std::optional<double> reference_gflops;
  // One optimizer step over a flat float32 shard, per element: "sgd", "adam", "adamw".
  std::map<std::string, double> optimizer_ns_per_element;
  // How much a collective running beside compute slows it: compute progresses at
  // 1 / (1 + contention) of its speed while one runs (0: not at all; 1: it loses the
  // collective's whole time, as when loopback TCP and compute share saturated cores).
  std::optional<double> contention;
  // A run's compute over what the prediction gave it, as `mfsdp show --calibrate` fitted it
  // (docs/predict.md#calibrating-against-a-run): multiplies every traced compute time.
  std::optional<double> run_factor;
  // An analytic device (predict/compute_rates.h): what times a shape-only trace's work. A
  // CPU trace's measured times are used where the plan has them.
  std::optional<ComputeRates> rates;
};

// Where a calibrated profile's factors come from (`mfsdp show --calibrate`): the run's plan
// and metrics, the factor on compute (ComputeProfile::run_factor) and the one its
// collectives' latencies and times per byte were multiplied by.
struct ProfileCalibration {
  std::string plan, metrics;
  double compute_factor = 1, collective_factor = 1;
};

struct Profile {
  std::string schema = kProfileSchemaVersion;
  std::string name;                         // "probe" for a measured one, else the built-in's name
  std::string description;                  // the machine, and where the numbers come from
  std::string backend;                      // "gloo" | "nccl"
  std::string device;                       // "cpu" or the GPU's name
  std::optional<int64_t> threads_per_rank;  // the intra-op threads the probe's ranks ran
  std::vector<CollectiveProfile> collectives;
  ComputeProfile compute;
  std::optional<ProfileCalibration> calibration;
};

// Least-squares fit of time = latency + bytes / bandwidth, weighted by 1/time^2 so that
// every size counts by its relative error (small messages fix the latency, large ones the
// bandwidth). Latency and bandwidth are kept >= 0 (a negative fitted latency becomes 0, with
// the bandwidth refitted through the origin). Needs two or more distinct sizes: Error(kUsage).
CollectiveCost fit_collective(const std::vector<ProfilePoint>& points);

// The cost of `kind` over a group of `world_size` ranks. A measured world size is used as is;
// another is scaled from the nearest measured one by the ring model (latency per hop, bus
// bandwidth per link; docs/predict.md#world-sizes), and `note`, when given, says so. A
// world size of 1 costs nothing. Error(kUsage) when the profile has no entry for `kind`.
CollectiveCost collective_cost(const Profile& profile, const std::string& kind, int64_t world_size,
                               std::string* note = nullptr);

// `profile` with every collective `collective_factor` times slower (latency, time per byte
// and the measured points) and compute `compute_factor` times slower (its run_factor), the
// calibration recorded. Error(kUsage) for a factor that is not a finite number > 0.
Profile calibrated_profile(const Profile& profile, const ProfileCalibration& calibration);

// JSON, as documented in docs/predict.md#profile-format. Parsing checks every field and
// throws Error(kUsage) naming the field.
nlohmann::ordered_json profile_to_json(const Profile& profile);
Profile parse_profile(const nlohmann::json& doc);
std::string profile_text(const Profile& profile);  // JSON, 2-space indent, final newline

// The built-in profiles' names, and one by name (none for an unknown name).
std::vector<std::string> builtin_profile_names();
std::string builtin_profile_list();  // "a100-nvlink, h100-nvlink, ..."
std::optional<Profile> builtin_profile(const std::string& name);

// `--profile FILE|NAME`: a built-in's name, else a profile file. Error(kUsage) naming the
// argument and the built-in names when it is neither.
Profile load_profile(const std::string& file_or_name);

}  // namespace mfsdp::predict
