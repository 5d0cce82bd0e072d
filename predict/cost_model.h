#pragma once
// The costs of a plan's step on a profiled machine (docs/predict.md#the-cost-model): the
// collectives' from the profile at the plan's group sizes, compute from the plan's trace
// (its unit times, scaled to the ranks and to the run's microbatch), the optimizer's from
// the profile's time per element over a rank's shard. No LibTorch here.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "predict/profile.h"
#include "predict/simulate.h"
#include "schema/optimizer.h"
#include "schema/plan.h"

namespace mfsdp::predict {

struct PredictOptions {
  // Multiplies the trace's compute times. None: the trace's calibration_gflops over the
  // profile's reference_gflops, or 1 when either is missing (with a note).
  std::optional<double> compute_scale;
  // Samples per microbatch on a rank. None: the traced batch. Compute scales linearly.
  std::optional<int64_t> microbatch_samples;
  std::string optimizer = schema::kDefaultOptimizer;  // a name of schema/optimizer.h
};

struct CostModel {
  StepCosts costs;
  double compute_scale = 1;  // applied: calibration times microbatch_samples / traced batch
  double calibration = 1;    // the device part of compute_scale (the run factor included)
  int64_t traced_batch = 1;
  int64_t microbatch_samples = 1;
  std::vector<std::string> notes;  // what was assumed: shown to the user
};

// Error(kUsage) when the plan has no trace with segment times ("re-plan with --trace-input"),
// for an unknown optimizer, or a compute scale or microbatch that is not positive.
CostModel step_costs(const schema::Plan& plan, const Profile& profile,
                     const PredictOptions& options);

// The samples of a trace input spec's first dimension ("8x64:int64" -> 8); 1 when unreadable.
int64_t traced_batch(const schema::Trace& trace);

}  // namespace mfsdp::predict
