#pragma once
// An analytic device (docs/predict.md#analytic-compute): peak rates and an efficiency per op
// class, which time the work a shape-only trace counted (schema::Work) instead of a trace's
// measured times. An operator of a class takes its fixed time plus its size at the class's
// efficiency of the peak:
//   matmul, attention:        op_us + max(FLOPs / (efficiency x tflops[dtype]),
//                                         bytes / (elementwise.efficiency x memory_gbps))
//   elementwise, embedding:   op_us + bytes / (efficiency x memory_gbps)
// Over n operators of S FLOPs (bytes) that is n x op_us + S / rate: the same as an efficiency
// that grows with an operator's size s as efficiency x s / (s + op_us x rate), so a sum over a
// stretch's operators needs only their count and total. No LibTorch here.

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "schema/plan.h"

namespace mfsdp::predict {

struct OpRate {
  double efficiency = 1;  // of the peak, for large operators: (0, 1]
  double op_us = 0;       // what an operator costs besides its size (launch, tail), µs
};

struct ComputeRates {
  // Dense peak FLOP/s in 10^12 per dtype of the products ("bfloat16", "float16", "float32").
  std::map<std::string, double> tflops;
  double memory_gbps = 0;  // peak memory bandwidth, 10^9 bytes per second
  OpRate matmul, attention, elementwise, embedding;
};

// µs of one op class's work, its products at `dtype`. `scale` multiplies its FLOPs and bytes
// (not its operators): a microbatch of other size than the traced one. Error(kUsage) when the
// rates have no peak for `dtype`.
double matmul_us(const schema::ClassWork& work, const ComputeRates& rates, const OpRate& rate,
                 const std::string& dtype, double scale = 1);
double memory_us(const schema::ClassWork& work, const ComputeRates& rates, const OpRate& rate,
                 double scale = 1);
// Every class of `work` together.
double work_us(const schema::Work& work, const ComputeRates& rates, const std::string& dtype,
               double scale = 1);

// The dtype a plan's products run in: the one most floating parameter elements compute in
// (schema::compute_dtype: policy.param_dtype, else their storage dtype).
std::string compute_dtype(const schema::Plan& plan);

// JSON (docs/predict.md#profile-format, compute.rates). Reading checks every field and throws
// Error(kUsage) naming it ("profile: compute.rates.matmul.efficiency: ...").
nlohmann::ordered_json rates_to_json(const ComputeRates& rates);
ComputeRates read_rates(const nlohmann::json& value, const std::string& where);

// "bfloat16 989 TFLOP/s, 3350 GB/s"
std::string rates_summary(const ComputeRates& rates, const std::string& dtype);

}  // namespace mfsdp::predict
