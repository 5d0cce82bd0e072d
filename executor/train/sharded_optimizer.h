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

 private:
  Context& context_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace mfsdp::executor
