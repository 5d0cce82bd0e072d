#pragma once
// An optimizer over a context's sharded fp32 master parameters. Elementwise optimizers (SGD
// with momentum, Adam, AdamW) give exactly the update they would give on the full
// parameters, one shard per rank; their state is sharded the same way.

#include <memory>
#include <string>

#include <torch/torch.h>

#include "executor/runtime/context.h"

namespace mfsdp::executor {

struct OptimizerConfig {
  std::string kind = "adamw";  // sgd | adam | adamw
  double lr = 1e-3;
  double weight_decay = 0.0;
  double momentum = 0.0;                          // sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
};

// The same optimizer over any parameter list; the reference trainer uses it on full
// parameters so both sides are configured identically. Throws Error(kUsage) for an unknown kind.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(std::vector<at::Tensor> params,
                                                        const OptimizerConfig& config);

class ShardedOptimizer {
 public:
  ShardedOptimizer(Context& context, const OptimizerConfig& config);
  // Steps on the main gradients of the last backward; leaves them for zero_grad().
  void step();
  void set_lr(double lr);
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  // Bytes of the per-parameter state (moments, momentum buffers, step counts) on this rank:
  // none before the first step, which creates it.
  int64_t state_bytes() const;
  // As constructed; set_lr does not change it. Checkpoints record it.
  const OptimizerConfig& config() const { return config_; }

  // The optimizer's per-parameter state (moments, step counts) for a checkpoint, keyed by
  // position in the context's sharded parameters. Loading needs an optimizer of the same kind
  // over a context of the same plan; the loaded state replaces this one's, hyperparameters
  // (the learning rate included) stay as configured here. Archives written under LibTorch 1.x
  // and 2.x load alike (read_param_states); Error(kUsage) names `where` for one that does not.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive,
            const std::string& where = "the optimizer state");

 private:
  Context& context_;
  OptimizerConfig config_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace mfsdp::executor
