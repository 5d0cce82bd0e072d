#include "tests/executor/parity/reference_training.h"

#include <set>
#include <sstream>
#include <string>
#include <type_traits>

#include <torch/script.h>

#include "tests/executor/parity/parity_config.h"

namespace mfsdp::testing {
namespace {

// LibTorch 1.13 keys an optimizer's state by the parameter's TensorImpl address printed as
// text, 2.x by the address itself.
template <typename StateMap>
auto find_state(StateMap& state, c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
    std::ostringstream key;
    key << impl;
    return state.find(key.str());
  } else {
    return state.find(impl);
  }
}

}  // namespace

TrainingResult train_reference(const TrainingTask& task, const std::string& model_path, int steps,
                               const std::string& optimizer, std::optional<double> clip_grad_norm,
                               at::Device device) {
  torch::jit::setGraphExecutorOptimize(false);  // as the executor runs graphs
  torch::jit::Module module = torch::jit::load(model_path);
  module.to(device);
  module.train();
  // Tied weights are registered twice; the optimizer must see each tensor once.
  std::vector<at::Tensor> unique;
  std::set<const c10::TensorImpl*> seen;
  for (const auto& p : module.named_parameters()) {
    if (p.value.requires_grad() && seen.insert(p.value.unsafeGetTensorImpl()).second) {
      unique.push_back(p.value);
    }
  }
  // Built here from torch::optim directly, not through the executor's optimizer factory.
  const executor::OptimizerConfig c = parity_optimizer(optimizer);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (c.kind == "sgd") {
    opt = std::make_unique<torch::optim::SGD>(
        unique, torch::optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
  } else {
    opt = std::make_unique<torch::optim::AdamW>(unique, torch::optim::AdamWOptions(c.lr)
                                                            .betas({c.beta1, c.beta2})
                                                            .eps(c.eps)
                                                            .weight_decay(c.weight_decay));
  }
  TrainingResult result;
  for (int step = 0; step < steps; ++step) {
    const Batch batch = global_batch(task, kParityBatch, step);
    const at::Tensor out = module.forward({batch.inputs.to(device)}).toTensor();
    const at::Tensor loss = task_loss(task, out, batch.targets.to(device));
    opt->zero_grad();
    loss.backward();
    if (clip_grad_norm) {
      result.grad_norms.push_back(torch::nn::utils::clip_grad_norm_(unique, *clip_grad_norm));
    }
    opt->step();
    result.losses.push_back(loss.item<double>());
  }
  for (const auto& p : module.named_parameters()) {
    result.params[p.name] = p.value.detach().to(at::kCPU).clone();
    auto& state = opt->state();
    auto it = find_state(state, p.value.unsafeGetTensorImpl());
    if (c.kind == "sgd" || it == state.end()) continue;
    const at::Tensor scale =
        static_cast<torch::optim::AdamWParamState&>(*it->second).exp_avg_sq().sqrt();
    // Exactly-zero gradients (unused embedding rows, dead units) are not noise: Adam leaves
    // them alone on both sides, and they must match.
    result.rounding_only[p.name] = ((scale > 0) & (scale < 1e-6 * scale.max())).to(at::kCPU);
  }
  return result;
}

double relative_difference(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-12);
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / scale;
}

}  // namespace mfsdp::testing
