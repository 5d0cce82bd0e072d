#include "executor/train/sharded_optimizer.h"

#include "executor/train/optimizer_state.h"

#include "schema/error.h"
#include "schema/optimizer.h"

namespace mfsdp::executor {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(std::vector<at::Tensor> params,
                                                        const OptimizerConfig& c) {
  if (c.kind == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
  }
  if (c.kind == "adam") {
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(c.lr)
                                                            .betas({c.beta1, c.beta2})
                                                            .eps(c.eps)
                                                            .weight_decay(c.weight_decay));
  }
  if (c.kind == "adamw") {
    return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(c.lr)
                                                             .betas({c.beta1, c.beta2})
                                                             .eps(c.eps)
                                                             .weight_decay(c.weight_decay));
  }
  fail(ExitCode::kUsage, "unknown optimizer '" + c.kind + "'; use " + schema::optimizer_choices());
}

namespace {

// LibTorch's CPU Adam and AdamW step with addcmul, which has no float16 kernel there: the
// first step would fail deep inside the optimizer. Said before training instead.
const std::vector<at::Tensor>& updatable(const std::vector<at::Tensor>& params,
                                         const OptimizerConfig& c) {
  if (c.kind != "adam" && c.kind != "adamw") return params;
  for (const at::Tensor& p : params) {
    if (p.device().is_cpu() && p.scalar_type() == at::kHalf) {
      fail(ExitCode::kUsage,
           "the plan keeps parameters in float16, and LibTorch's " + c.kind +
               " cannot update float16 tensors on the CPU; train them on a GPU, use "
               "--optimizer sgd, or save the model in float32 or bfloat16 (mixed precision "
               "then computes in --param-dtype float16 if you want it)");
    }
  }
  return params;
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(Context& context, const OptimizerConfig& config)
    : context_(context),
      config_(config),
      optimizer_(make_optimizer(updatable(context.sharded_parameters(), config), config)) {}

void ShardedOptimizer::step() {
  context_.sync_gradients();
  at::NoGradGuard no_grad;
  optimizer_->step();
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t bytes = 0;
  auto add = [&](const at::Tensor& t) {
    if (t.defined()) bytes += static_cast<int64_t>(t.numel() * t.element_size());
  };
  for (const auto& entry : optimizer_->state()) {
    const torch::optim::OptimizerParamState* state = entry.second.get();
    if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state)) {
      add(adam->exp_avg());
      add(adam->exp_avg_sq());
      add(adam->max_exp_avg_sq());
    } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
      add(adamw->exp_avg());
      add(adamw->exp_avg_sq());
      add(adamw->max_exp_avg_sq());
    } else if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state)) {
      add(sgd->momentum_buffer());
    }
  }
  return bytes;
}

void ShardedOptimizer::save(torch::serialize::OutputArchive& archive) const {
  optimizer_->save(archive);
}

void ShardedOptimizer::load(torch::serialize::InputArchive& archive, const std::string& where) {
  // Saved state maps to parameters by their position in the parameter groups, so it lands on
  // this context's master shards, in plan order. Not through LibTorch's own load(), which
  // under 2.x gives a 1.x archive's state to one parameter (it reads 1.x's hexadecimal keys as
  // decimal numbers).
  set_param_states(*optimizer_, read_param_states(archive, where));
}

void ShardedOptimizer::set_lr(double lr) {
  for (auto& group : optimizer_->param_groups()) {
    group.options().set_lr(lr);
  }
}

}  // namespace mfsdp::executor
