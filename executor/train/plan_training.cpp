#include "executor/train/plan_training.h"

#include "schema/model_path.h"
#include "schema/plan_loader.h"

namespace mfsdp::executor {

void apply_plan_training(const schema::Training& t, TrainConfig& config,
                         const std::function<bool(const std::string& flag)>& given) {
  const auto unset = [&given](const char* flag) { return !given || !given(flag); };
  if (t.steps && unset("--steps")) config.steps = *t.steps;
  if (t.global_batch && unset("--global-batch")) config.data.global_batch = *t.global_batch;
  if (t.microbatches && unset("--microbatches")) config.data.microbatches = *t.microbatches;
  if (t.optimizer && unset("--optimizer")) config.optimizer.kind = *t.optimizer;
  if (t.lr && unset("--lr")) config.optimizer.lr = *t.lr;
  if (t.weight_decay && unset("--weight-decay")) config.optimizer.weight_decay = *t.weight_decay;
  if (t.betas && t.betas->size() == 2 && unset("--betas")) {
    config.optimizer.beta1 = (*t.betas)[0];
    config.optimizer.beta2 = (*t.betas)[1];
  }
  if (t.momentum && unset("--momentum")) config.optimizer.momentum = *t.momentum;
  if (t.warmup && unset("--warmup")) config.warmup_steps = *t.warmup;
  if (t.lr_schedule && unset("--lr-schedule")) config.lr_schedule = *t.lr_schedule;
  if (t.clip_grad_norm && unset("--clip-grad-norm")) config.clip_grad_norm = *t.clip_grad_norm;
  if (t.loss && unset("--loss")) config.loss = *t.loss;
  if (t.seed && unset("--seed")) config.data.seed = static_cast<uint64_t>(*t.seed);
}

TrainConfig train_config_from_plan(const std::string& plan_path) {
  const schema::Plan plan = schema::load_plan_file(plan_path, schema::PlanCheck::kShape);
  TrainConfig config;
  config.plan_path = plan_path;
  config.model_path = schema::locate_model(plan.model.path, plan_path).path;
  if (plan.training) apply_plan_training(*plan.training, config);
  return config;
}

}  // namespace mfsdp::executor
