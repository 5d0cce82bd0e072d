#pragma once
// The small training problems the parity tests use: a fixture model, a deterministic global
// batch per step, and its loss. Shared by the distributed worker and the single-process
// reference, which otherwise have nothing in common.

#include <string>

#include <torch/torch.h>

namespace mfsdp::testing {

struct TrainingTask {
  std::string fixture;          // file name under tests/fixtures
  bool language_model = false;  // cross-entropy over next tokens; else MSE regression
  int64_t in_features = 0;      // regression input width, or LM sequence length
  int64_t out_features = 0;     // regression target width, or LM vocabulary
};

// "tied_lm", "reordered", "two_roots".
TrainingTask task_named(const std::string& name);

struct Batch {
  at::Tensor inputs, targets;
};
// The whole global batch of `step`, identical for every world size.
Batch global_batch(const TrainingTask& task, int64_t batch, int64_t step);
// Rows [begin, end) of a batch.
Batch rows(const Batch& batch, int64_t begin, int64_t end);
// Mean loss of a model output against targets.
at::Tensor task_loss(const TrainingTask& task, const at::Tensor& output, const at::Tensor& targets);

}  // namespace mfsdp::testing
