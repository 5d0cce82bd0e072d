#pragma once
// `mfsdp show PLAN --predict --metrics M --calibrate OUT` (docs/predict.md#calibrating-against-
// a-run): the two factors that make a plan's prediction match what a run of it measured, its
// compute (step minus exposed communication) and its exposed communication, written as a
// calibrated profile for predicting, comparing and searching other plans on that machine.

#include <string>
#include <vector>

#include "predict/plan_prediction.h"
#include "predict/profile.h"
#include "schema/plan.h"

namespace mfsdp::predict {

struct CalibrationFit {
  predict::Profile profile;  // `profile` with the factors applied and recorded
  double compute_factor = 1, collective_factor = 1;
  std::vector<std::string> notes;  // where a factor met its bounds
};

// Fits compute_factor so that predicted compute + contention is the measured step minus its
// exposed communication, and collective_factor so that the predicted exposed communication is
// the measured one (it grows with the collectives' times), alternating until both settle.
// `plan_path` and `metrics_path` are recorded in the profile. Error(kUsage) when the metrics
// give no step or exposed time, or the step is not longer than its exposed time.
CalibrationFit calibrate(const schema::Plan& plan, const predict::Profile& profile,
                         const PredictRequest& request, const Measured& measured,
                         const std::string& plan_path, const std::string& metrics_path);

}  // namespace mfsdp::predict
