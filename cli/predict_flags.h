#pragma once
// The flags that say what to predict (docs/predict.md), shared by `mfsdp show --predict`,
// `mfsdp plan --profile/--optimize/--sweep` and `mfsdp diff --profile`: --profile,
// --microbatches, --microbatch-size, --compute-scale and --optimizer.

#include <string>

#include <CLI/CLI.hpp>

#include "predict/plan_prediction.h"

namespace mfsdp::cli {

// As given, checked by predict_request.
struct PredictFlags {
  std::string profile, microbatches, microbatch_size, compute_scale, optimizer;
};

// Adds the five flags to `cmd`; `when` begins each help line that is not --profile's (e.g.
// "With --predict: ").
void add_predict_flags(CLI::App& cmd, PredictFlags& flags, const std::string& when);

// The names of the flags besides --profile, for commands that refuse them without it.
const std::vector<std::string>& predict_detail_flags();

// The request the flags make: whole numbers in range, a scale > 0. Error(kUsage), one line
// naming the flag, otherwise.
predict::PredictRequest predict_request(const PredictFlags& flags);

}  // namespace mfsdp::cli
