#include "predict/calibrate.h"

#include <cmath>

#include "schema/error.h"

namespace mfsdp::predict {

namespace {

// Collective factors searched, and how close the fit comes.
constexpr double kLowest = 1e-3, kHighest = 1e3;
constexpr int kRounds = 30, kHalvings = 40;
constexpr double kSettled = 1e-4;

}  // namespace

CalibrationFit calibrate(const schema::Plan& plan, const predict::Profile& profile,
                         const PredictRequest& request, const Measured& measured,
                         const std::string& plan_path, const std::string& metrics_path) {
  if (!measured.step_ms || !measured.exposed_comm_ms) {
    fail(ExitCode::kUsage, metrics_path +
                               ": no step_ms and exposed_comm_ms to calibrate against; give "
                               "the --metrics file of a run of this plan");
  }
  const double step_us = *measured.step_ms * 1000;
  const double exposed_us = *measured.exposed_comm_ms * 1000;
  if (!(step_us > exposed_us)) {
    fail(ExitCode::kUsage, metrics_path + ": the measured step (" +
                               std::to_string(*measured.step_ms) +
                               " ms) is not longer than its exposed communication; nothing is "
                               "left for compute to calibrate against");
  }
  PredictRequest alone = request;  // the fit predicts; the measured figures are given
  alone.metrics_path.clear();
  alone.run_trace_path.clear();
  CalibrationFit fit;
  const auto predict = [&](double compute, double collectives) {
    predict::ProfileCalibration c;
    c.plan = plan_path;
    c.metrics = metrics_path;
    c.compute_factor = compute;
    c.collective_factor = collectives;
    return predict_plan(plan, predict::calibrated_profile(profile, c), alone).prediction;
  };
  double compute = 1, collectives = 1;
  bool low = false, high = false;
  for (int round = 0; round < kRounds; ++round) {
    const predict::Prediction p = predict(compute, collectives);
    const double busy = p.compute_us + p.contention_us;
    const double next_compute = busy > 0 ? compute * (step_us - exposed_us) / busy : compute;
    // The exposed time grows with the collectives' factor: halve the interval (in logs).
    double lo = std::log(kLowest), hi = std::log(kHighest);
    low = predict(next_compute, kLowest).exposed_comm_us >= exposed_us;
    high = predict(next_compute, kHighest).exposed_comm_us <= exposed_us;
    double next_collectives = low ? kLowest : high ? kHighest : collectives;
    if (!low && !high) {
      for (int i = 0; i < kHalvings; ++i) {
        const double mid = (lo + hi) / 2;
        (predict(next_compute, std::exp(mid)).exposed_comm_us < exposed_us ? lo : hi) = mid;
      }
      next_collectives = std::exp((lo + hi) / 2);
    }
    const bool settled = std::abs(next_compute / compute - 1) < kSettled &&
                         std::abs(next_collectives / collectives - 1) < kSettled;
    compute = next_compute;
    collectives = next_collectives;
    if (settled) break;
  }
  if (low) {
    fit.notes.push_back(
        "the run waited less for collectives than even 1/1000 of the "
        "profile's times predict; collectives kept at x0.001");
  }
  if (high) {
    fit.notes.push_back(
        "the run waited more for collectives than 1000 times the profile's "
        "times predict; collectives kept at x1000");
  }
  predict::ProfileCalibration c;
  c.plan = plan_path;
  c.metrics = metrics_path;
  c.compute_factor = compute;
  c.collective_factor = collectives;
  fit.profile = predict::calibrated_profile(profile, c);
  fit.compute_factor = compute;
  fit.collective_factor = collectives;
  return fit;
}

}  // namespace mfsdp::predict
