#include "tests/executor/parity/training_task.h"

#include <stdexcept>

namespace mfsdp::testing {

TrainingTask task_named(const std::string& name) {
  if (name == "tied_lm") return {"tied_lm.pt", true, 16, 256};
  if (name == "reordered") return {"reordered.pt", false, 8, 4};
  if (name == "two_roots") return {"two_roots.pt", false, 16, 16};
  if (name == "called_twice") return {"called_twice.pt", false, 8, 4};
  if (name == "dropout_lm") return {"dropout_lm.pt", true, 16, 256};
  if (name == "looped_lm") return {"looped_lm.pt", true, 16, 256};
  if (name == "constant_loops") return {"constant_loops.pt", false, 8, 4};
  if (name == "while_loop") return {"while_loop.pt", false, 8, 4};
  throw std::invalid_argument("unknown training task " + name);
}

Batch global_batch(const TrainingTask& task, int64_t batch, int64_t step) {
  torch::Generator gen = at::detail::createCPUGenerator(1000 + step);
  if (task.language_model) {
    const at::Tensor tokens =
        torch::randint(task.out_features, {batch, task.in_features + 1}, gen, torch::kLong);
    return {tokens.narrow(1, 0, task.in_features).contiguous(),
            tokens.narrow(1, 1, task.in_features).contiguous()};
  }
  return {torch::randn({batch, task.in_features}, gen),
          torch::randn({batch, task.out_features}, gen)};
}

Batch rows(const Batch& batch, int64_t begin, int64_t end) {
  return {batch.inputs.narrow(0, begin, end - begin), batch.targets.narrow(0, begin, end - begin)};
}

at::Tensor task_loss(const TrainingTask& task, const at::Tensor& output,
                     const at::Tensor& targets) {
  if (task.language_model) {
    return torch::nn::functional::cross_entropy(output.reshape({-1, task.out_features}),
                                                targets.reshape({-1}));
  }
  return torch::mse_loss(output, targets);
}

}  // namespace mfsdp::testing
