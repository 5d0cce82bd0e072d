#pragma once
// Rank 0's progress lines during training: one per step, printed every --log-every steps (and
// at the first and last), or redrawn in place with live progress. No LibTorch.

#include <cstdint>
#include <optional>
#include <ostream>

namespace mfsdp::executor {

struct TrainConfig;

// What one optimizer step measured.
struct StepRecord {
  double local_loss = 0;
  double loss = 0;
  double ms = 0;
  double exposed_ms = 0;
  std::optional<double> grad_norm;
};

class Progress {
 public:
  Progress(const TrainConfig& config, std::ostream& out, int64_t samples_per_step)
      : config_(config), out_(out), samples_(samples_per_step) {}

  // Step `step` (0-based) is done, at learning rate `lr`; `mean_ms` is the mean step time.
  void step(int64_t step, double lr, const StepRecord& r, double mean_ms);

 private:
  int digits() const;
  const TrainConfig& config_;
  std::ostream& out_;
  int64_t samples_;
};

}  // namespace mfsdp::executor
