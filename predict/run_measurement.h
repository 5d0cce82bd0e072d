#pragma once
// What a run measured, read back for comparing with a prediction and for calibrating
// (docs/predict.md#comparing-with-a-run): a run's --metrics file (step time, exposed
// communication) and its --trace file (per-unit times). No LibTorch here.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace mfsdp::predict {

// Per unit, milliseconds per step.
struct UnitFigures {
  double forward_ms = 0, backward_ms = 0;  // as a run's trace draws them (nested units included)
  double all_gather_ms = 0, wait_ms = 0, reduce_scatter_ms = 0;
};

struct Measured {
  std::optional<double> step_ms, exposed_comm_ms;  // from --metrics
  int64_t steps = 0, ranks = 0;                    // the steps and ranks the medians are over
  std::map<std::string, UnitFigures> units;        // from --trace (no all_gather_ms/RS)
  int64_t traced_steps = 0;
};

// A run's --metrics file: per step the slowest rank's step_ms, and every rank's
// exposed_comm_ms; the medians over the steps after the first (all of them when there is
// one). Error(kUsage) for a file with no step lines.
Measured read_run_metrics(const std::string& path);
// A run's --trace file: per unit the mean over ranks of its forward, backward and
// wait-for-all-gather spans per traced step.
void read_run_trace(const std::string& path, Measured& into);

}  // namespace mfsdp::predict
