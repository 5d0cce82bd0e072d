#include "predict/compute_rates.h"

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

#include "predict/profile_fields.h"
#include "schema/error.h"
#include "schema/plan_rules.h"

namespace mfsdp::predict {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using profile_json::bad;
using profile_json::Fields;

constexpr double kFlopsPerUsInTflops = 1e6;  // 10^12 FLOP/s = 10^6 FLOP per µs
constexpr double kBytesPerUsInGbps = 1e3;    // 10^9 B/s = 10^3 bytes per µs

const char* const kClasses[] = {"matmul", "attention", "elementwise", "embedding"};

template <typename Rates>  // ComputeRates, const or not
auto* rate_of(Rates& rates, const std::string& name) {
  if (name == "matmul") return &rates.matmul;
  if (name == "attention") return &rates.attention;
  if (name == "elementwise") return &rates.elementwise;
  return &rates.embedding;
}

std::string number_text(double value) {
  std::ostringstream out;
  out.precision(4);
  out << value;
  return out.str();
}

}  // namespace

double memory_us(const schema::ClassWork& work, const ComputeRates& rates, const OpRate& rate,
                 double scale) {
  const double bytes_per_us = rate.efficiency * rates.memory_gbps * kBytesPerUsInGbps;
  return static_cast<double>(work.ops) * rate.op_us +
         static_cast<double>(work.bytes) * scale / bytes_per_us;
}

double matmul_us(const schema::ClassWork& work, const ComputeRates& rates, const OpRate& rate,
                 const std::string& dtype, double scale) {
  if (work.ops == 0 && work.flops == 0 && work.bytes == 0) return 0;
  const auto peak = rates.tflops.find(dtype);
  if (peak == rates.tflops.end()) {
    std::string known;
    for (const auto& [name, _] : rates.tflops) known += (known.empty() ? "" : ", ") + name;
    fail(ExitCode::kUsage, "the profile's compute rates have no peak for " + dtype +
                               " products (compute.rates.tflops has " +
                               (known.empty() ? std::string("none") : known) +
                               "); add one (docs/predict.md#analytic-compute)");
  }
  const double flops_per_us = rate.efficiency * peak->second * kFlopsPerUsInTflops;
  const double bytes_per_us = rates.elementwise.efficiency * rates.memory_gbps * kBytesPerUsInGbps;
  const double compute = static_cast<double>(work.flops) * scale / flops_per_us;
  const double memory = static_cast<double>(work.bytes) * scale / bytes_per_us;
  return static_cast<double>(work.ops) * rate.op_us + std::max(compute, memory);
}

double work_us(const schema::Work& work, const ComputeRates& rates, const std::string& dtype,
               double scale) {
  return matmul_us(work.matmul, rates, rates.matmul, dtype, scale) +
         matmul_us(work.attention, rates, rates.attention, dtype, scale) +
         memory_us(work.elementwise, rates, rates.elementwise, scale) +
         memory_us(work.embedding, rates, rates.embedding, scale);
}

std::string compute_dtype(const schema::Plan& plan) {
  std::map<std::string, int64_t> elements;  // per dtype the groups compute in
  for (const schema::Unit& unit : plan.units) {
    for (const schema::Group& group : unit.groups) {
      if (schema::is_floating_dtype(group.dtype)) {
        elements[schema::compute_dtype(plan.policy, group.dtype)] += group.numel;
      }
    }
  }
  std::string most = plan.policy.param_dtype.value_or("float32");
  int64_t count = -1;
  for (const auto& [dtype, n] : elements) {
    if (n > count) {
      most = dtype;
      count = n;
    }
  }
  return most;
}

ordered_json rates_to_json(const ComputeRates& rates) {
  ordered_json j = ordered_json::object();
  ordered_json peaks = ordered_json::object();
  for (const auto& [dtype, tflops] : rates.tflops) peaks[dtype] = tflops;
  j["tflops"] = peaks;
  j["memory_gbps"] = rates.memory_gbps;
  for (const char* name : kClasses) {
    const OpRate& r = *rate_of(rates, name);
    j[name] = {{"efficiency", r.efficiency}, {"op_us", r.op_us}};
  }
  return j;
}

ComputeRates read_rates(const json& value, const std::string& where) {
  Fields f(value, where);
  ComputeRates rates;
  const json& peaks = f.need("tflops");
  if (!peaks.is_object()) bad(f.at("tflops"), "must be an object");
  for (auto it = peaks.begin(); it != peaks.end(); ++it) {
    const std::string at = f.at("tflops") + "." + it.key();
    const double tflops = f.number(it.value(), at);
    if (tflops <= 0) bad(at, "must be > 0");
    rates.tflops[it.key()] = tflops;
  }
  if (rates.tflops.empty()) bad(f.at("tflops"), "has no dtype (e.g. \"bfloat16\": 989)");
  rates.memory_gbps = f.number("memory_gbps");
  if (rates.memory_gbps <= 0) bad(f.at("memory_gbps"), "must be > 0");
  for (const char* name : kClasses) {
    Fields r(f.need(name), f.at(name));
    OpRate& rate = *rate_of(rates, name);
    rate.efficiency = r.number("efficiency");
    if (rate.efficiency <= 0 || rate.efficiency > 1) {
      bad(r.at("efficiency"), "must be in (0, 1], a share of the peak");
    }
    rate.op_us = r.number("op_us");
    r.finish();
  }
  f.finish();
  return rates;
}

std::string rates_summary(const ComputeRates& rates, const std::string& dtype) {
  const auto peak = rates.tflops.find(dtype);
  return (peak == rates.tflops.end() ? dtype + " (no peak)"
                                     : dtype + " " + number_text(peak->second) + " TFLOP/s") +
         ", " + number_text(rates.memory_gbps) + " GB/s";
}

}  // namespace mfsdp::predict
