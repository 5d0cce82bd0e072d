#include "predict/profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "predict/profile_fields.h"
#include "predict/ring_model.h"
#include "schema/error.h"
#include "schema/json_text.h"
#include "schema/optimizer.h"

namespace mfsdp::predict {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using profile_json::bad;
using profile_json::Fields;
using schema::parse_json_text;

const char* const kKinds[] = {"all_gather", "reduce_scatter", "all_reduce"};

bool known_kind(const std::string& kind) {
  return std::find(std::begin(kKinds), std::end(kKinds), kind) != std::end(kKinds);
}

CollectiveProfile read_collective(const json& value, const std::string& where) {
  Fields f(value, where);
  CollectiveProfile c;
  c.kind = f.text("kind");
  if (!known_kind(c.kind)) {
    bad(f.at("kind"), "'" + c.kind + "' is not all_gather, reduce_scatter or all_reduce");
  }
  c.world_size = f.whole("world_size", 2);
  c.cost.latency_us = f.number("latency_us");
  c.cost.bytes_per_us = f.number("bytes_per_us");
  if (const json* points = f.find("points")) {
    if (!points->is_array()) bad(f.at("points"), "must be an array");
    for (size_t i = 0; i < points->size(); ++i) {
      const std::string at = f.at("points") + "[" + std::to_string(i) + "]";
      Fields p((*points)[i], at);
      ProfilePoint point;
      point.bytes = p.whole("bytes", 1);
      point.us = p.number("us");
      p.finish();
      c.points.push_back(point);
    }
  }
  f.finish();
  return c;
}

ComputeProfile read_compute(const json& value) {
  Fields f(value, "compute");
  ComputeProfile c;
  if (const json* gflops = f.find("reference_gflops")) {
    c.reference_gflops = f.number(*gflops, f.at("reference_gflops"));
    if (*c.reference_gflops <= 0) bad(f.at("reference_gflops"), "must be > 0");
  }
  if (const json* per = f.find("optimizer_ns_per_element")) {
    Fields optimizers(*per, f.at("optimizer_ns_per_element"));
    for (const schema::OptimizerKind& kind : schema::optimizer_kinds()) {
      const char* name = kind.name;
      if (const json* ns = optimizers.find(name)) {
        c.optimizer_ns_per_element[name] = optimizers.number(*ns, optimizers.at(name));
      }
    }
    optimizers.finish();
  }
  if (const json* contention = f.find("contention")) {
    c.contention = f.number(*contention, f.at("contention"));
  }
  if (const json* factor = f.find("run_factor")) {
    c.run_factor = f.number(*factor, f.at("run_factor"));
    if (*c.run_factor <= 0) bad(f.at("run_factor"), "must be > 0");
  }
  if (const json* rates = f.find("rates")) c.rates = read_rates(*rates, f.at("rates"));
  f.finish();
  return c;
}

ProfileCalibration read_calibration(const json& value) {
  Fields f(value, "calibration");
  ProfileCalibration c;
  c.plan = f.text("plan");
  c.metrics = f.text("metrics");
  c.compute_factor = f.number("compute_factor");
  c.collective_factor = f.number("collective_factor");
  for (const char* key : {"compute_factor", "collective_factor"}) {
    const double v = std::string(key) == "compute_factor" ? c.compute_factor : c.collective_factor;
    if (v <= 0) bad(f.at(key), "must be > 0");
  }
  f.finish();
  return c;
}

}  // namespace

CollectiveCost fit_collective(const std::vector<ProfilePoint>& points) {
  std::set<int64_t> sizes;
  for (const ProfilePoint& p : points) {
    if (p.bytes < 1 || !(p.us > 0) || !std::isfinite(p.us)) {
      fail(ExitCode::kUsage, "a profile point needs bytes >= 1 and a time > 0");
    }
    sizes.insert(p.bytes);
  }
  if (sizes.size() < 2) {
    fail(ExitCode::kUsage, "fitting a collective's cost needs two or more sizes, not " +
                               std::to_string(sizes.size()));
  }
  // Weighted normal equations of t = a + b x, weight 1/t^2.
  double sw = 0, sx = 0, sxx = 0, st = 0, sxt = 0;
  for (const ProfilePoint& p : points) {
    const double w = 1 / (p.us * p.us), x = static_cast<double>(p.bytes);
    sw += w;
    sx += w * x;
    sxx += w * x * x;
    st += w * p.us;
    sxt += w * x * p.us;
  }
  const double det = sw * sxx - sx * sx;
  double a = (sxx * st - sx * sxt) / det;
  double b = (sw * sxt - sx * st) / det;
  if (a < 0) {  // through the origin
    a = 0;
    b = sxt / sxx;
  }
  CollectiveCost cost;
  if (b <= 0) {  // no size effect: the weighted mean time, no bandwidth term
    cost.latency_us = st / sw;
    return cost;
  }
  cost.latency_us = a;
  cost.bytes_per_us = 1 / b;
  return cost;
}

CollectiveCost collective_cost(const Profile& profile, const std::string& kind, int64_t world_size,
                               std::string* note) {
  if (world_size <= 1) return {};
  const CollectiveProfile* nearest = nullptr;
  double distance = 0;
  for (const CollectiveProfile& c : profile.collectives) {
    if (c.kind != kind) continue;
    const double d = std::abs(std::log(static_cast<double>(c.world_size) / world_size));
    // The nearest by ratio; between two as near, the larger (more hops measured).
    if (nearest == nullptr || d < distance ||
        (d == distance && c.world_size > nearest->world_size)) {
      nearest = &c;
      distance = d;
    }
  }
  if (nearest == nullptr) {
    fail(ExitCode::kUsage, "profile '" + profile.name + "' has no " + kind +
                               "; probe it with mfsdp probe (docs/predict.md#profiles)");
  }
  if (nearest->world_size == world_size) return nearest->cost;
  const int64_t from = nearest->world_size;
  CollectiveCost cost;
  cost.latency_us = nearest->cost.latency_us * ring::hops(world_size) / ring::hops(from);
  cost.bytes_per_us = nearest->cost.bytes_per_us * ring::share(from) / ring::share(world_size);
  if (note != nullptr) {
    *note = kind + " over " + std::to_string(world_size) + " ranks scaled by the ring model from " +
            std::to_string(from) + " measured in profile '" + profile.name + "'";
  }
  return cost;
}

ordered_json profile_to_json(const Profile& profile) {
  ordered_json j = ordered_json::object();
  j["schema"] = profile.schema;
  j["name"] = profile.name;
  j["description"] = profile.description;
  j["backend"] = profile.backend;
  j["device"] = profile.device;
  if (profile.threads_per_rank) j["threads_per_rank"] = *profile.threads_per_rank;
  ordered_json collectives = ordered_json::array();
  for (const CollectiveProfile& c : profile.collectives) {
    ordered_json e = ordered_json::object();
    e["kind"] = c.kind;
    e["world_size"] = c.world_size;
    e["latency_us"] = c.cost.latency_us;
    e["bytes_per_us"] = c.cost.bytes_per_us;
    if (!c.points.empty()) {
      ordered_json points = ordered_json::array();
      for (const ProfilePoint& p : c.points) points.push_back({{"bytes", p.bytes}, {"us", p.us}});
      e["points"] = points;
    }
    collectives.push_back(e);
  }
  j["collectives"] = collectives;
  ordered_json compute = ordered_json::object();
  if (profile.compute.reference_gflops) {
    compute["reference_gflops"] = *profile.compute.reference_gflops;
  }
  if (!profile.compute.optimizer_ns_per_element.empty()) {
    ordered_json per = ordered_json::object();
    for (const auto& [name, ns] : profile.compute.optimizer_ns_per_element) per[name] = ns;
    compute["optimizer_ns_per_element"] = per;
  }
  if (profile.compute.contention) compute["contention"] = *profile.compute.contention;
  if (profile.compute.run_factor) compute["run_factor"] = *profile.compute.run_factor;
  if (profile.compute.rates) compute["rates"] = rates_to_json(*profile.compute.rates);
  j["compute"] = compute;
  if (profile.calibration) {
    const ProfileCalibration& c = *profile.calibration;
    j["calibration"] = {{"plan", c.plan},
                        {"metrics", c.metrics},
                        {"compute_factor", c.compute_factor},
                        {"collective_factor", c.collective_factor}};
  }
  return j;
}

Profile calibrated_profile(const Profile& profile, const ProfileCalibration& calibration) {
  for (const double factor : {calibration.compute_factor, calibration.collective_factor}) {
    if (!(factor > 0) || !std::isfinite(factor)) {
      fail(ExitCode::kUsage,
           "a calibration factor must be a finite number > 0, not " + std::to_string(factor));
    }
  }
  Profile out = profile;
  for (CollectiveProfile& c : out.collectives) {
    c.cost.latency_us *= calibration.collective_factor;
    if (c.cost.bytes_per_us > 0) c.cost.bytes_per_us /= calibration.collective_factor;
    for (ProfilePoint& point : c.points) point.us *= calibration.collective_factor;
  }
  out.compute.run_factor = profile.compute.run_factor.value_or(1) * calibration.compute_factor;
  ProfileCalibration recorded = calibration;
  if (profile.calibration) {  // a second calibration composes with the first
    recorded.compute_factor *= profile.calibration->compute_factor;
    recorded.collective_factor *= profile.calibration->collective_factor;
  }
  out.calibration = recorded;
  return out;
}

std::string profile_text(const Profile& profile) {
  return profile_to_json(profile).dump(2) + "\n";
}

Profile parse_profile(const json& doc) {
  Fields f(doc, "");
  Profile p;
  p.schema = f.text("schema");
  if (p.schema != kProfileSchemaVersion) {
    bad("schema", "'" + p.schema + "' is not " + kProfileSchemaVersion +
                      "; this mfsdp reads that version only");
  }
  p.name = f.text("name");
  p.description = f.text("description");
  p.backend = f.text("backend");
  p.device = f.text("device");
  if (f.find("threads_per_rank") != nullptr) p.threads_per_rank = f.whole("threads_per_rank", 1);
  const json& collectives = f.need("collectives");
  if (!collectives.is_array()) bad("collectives", "must be an array");
  std::set<std::pair<std::string, int64_t>> seen;
  for (size_t i = 0; i < collectives.size(); ++i) {
    const std::string at = "collectives[" + std::to_string(i) + "]";
    CollectiveProfile c = read_collective(collectives[i], at);
    if (!seen.emplace(c.kind, c.world_size).second) {
      bad(at, "a second " + c.kind + " at world size " + std::to_string(c.world_size));
    }
    p.collectives.push_back(std::move(c));
  }
  if (const json* compute = f.find("compute")) p.compute = read_compute(*compute);
  if (const json* calibration = f.find("calibration")) {
    p.calibration = read_calibration(*calibration);
  }
  f.finish();
  return p;
}

Profile load_profile(const std::string& file_or_name) {
  if (std::optional<Profile> builtin = builtin_profile(file_or_name)) return *builtin;
  std::ifstream in(file_or_name, std::ios::binary);
  if (!in) {
    fail(ExitCode::kUsage, "--profile " + file_or_name +
                               ": neither a profile file nor a built-in profile (" +
                               builtin_profile_list() + "); make one with mfsdp probe");
  }
  std::stringstream text;
  text << in.rdbuf();
  json doc;
  const std::string error = parse_json_text(text.str(), doc);
  if (!error.empty()) fail(ExitCode::kUsage, file_or_name + ": not valid JSON: " + error);
  try {
    return parse_profile(doc);
  } catch (const Error& e) {
    fail(e.code(), file_or_name + ": " + e.what());
  }
}

}  // namespace mfsdp::predict
