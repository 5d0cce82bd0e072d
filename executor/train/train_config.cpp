// TrainConfig (trainer.h): its record for checkpoints, its checks, and the learning-rate
// schedule.
#include <algorithm>
#include <cmath>
#include <string>

#include <torch/torch.h>

#include "executor/train/trainer.h"
#include "schema/error.h"

namespace mfsdp::executor {

nlohmann::json TrainConfig::describe() const {
  nlohmann::json j = {{"loss", loss},
                      {"steps", steps},
                      {"global_batch", data.global_batch},
                      {"microbatches", data.microbatches},
                      {"data", data.kind == "synthetic" ? "synthetic" : data.path},
                      {"data_kind", data.kind},
                      {"seq_len", data.seq_len},
                      {"seed", data.seed},
                      {"optimizer", optimizer.kind},
                      {"lr", optimizer.lr},
                      {"weight_decay", optimizer.weight_decay},
                      {"momentum", optimizer.momentum},
                      {"betas", {optimizer.beta1, optimizer.beta2}},
                      {"warmup", warmup_steps},
                      {"lr_schedule", lr_schedule}};
  if (clip_grad_norm) j["clip_grad_norm"] = *clip_grad_norm;
  return j;
}

void check_train_config(const TrainConfig& config, int world_size) {
  if (config.steps <= 0) {
    fail(ExitCode::kUsage, "--steps must be positive, got " + std::to_string(config.steps));
  }
  split_batch(config.data.global_batch, world_size, config.data.microbatches);
  if (config.optimizer.lr <= 0 || !std::isfinite(config.optimizer.lr)) {
    fail(ExitCode::kUsage, "--lr must be a positive number");
  }
  if (config.warmup_steps < 0) fail(ExitCode::kUsage, "--warmup must be 0 or more steps");
  if (config.lr_schedule != "constant" && config.lr_schedule != "cosine") {
    fail(ExitCode::kUsage,
         "--lr-schedule must be constant or cosine, got '" + config.lr_schedule + "'");
  }
  if (config.clip_grad_norm && !(*config.clip_grad_norm > 0)) {
    fail(ExitCode::kUsage, "--clip-grad-norm must be positive");
  }
  if (config.checkpoint_every < 0) {
    fail(ExitCode::kUsage, "--checkpoint-every must be 0 or more steps");
  }
  if (config.keep_checkpoints < 0) {
    fail(ExitCode::kUsage, "--keep-checkpoints must be 0 (keep all) or more, got " +
                               std::to_string(config.keep_checkpoints));
  }
  if (config.resume && config.resume_from.empty() && config.checkpoint_dir.empty()) {
    fail(ExitCode::kUsage,
         "--resume needs --checkpoint-dir, or the checkpoint to resume: --resume CKPT");
  }
  if (config.checkpoint_every > 0 && config.checkpoint_dir.empty()) {
    fail(ExitCode::kUsage, "--checkpoint-every needs --checkpoint-dir");
  }
  if (config.trace_steps <= 0) fail(ExitCode::kUsage, "--trace-steps must be positive");
  make_optimizer({torch::zeros({1}, torch::requires_grad())}, config.optimizer);
}

double learning_rate(const TrainConfig& config, int64_t step) {
  const double lr = config.optimizer.lr;
  if (step < config.warmup_steps) return lr * static_cast<double>(step + 1) / config.warmup_steps;
  if (config.lr_schedule == "constant") return lr;
  const int64_t span = std::max<int64_t>(config.steps - config.warmup_steps - 1, 1);
  const double progress = std::min(1.0, static_cast<double>(step - config.warmup_steps) / span);
  const double floor = 0.1 * lr;
  return floor + 0.5 * (lr - floor) * (1 + std::cos(M_PI * progress));
}

}  // namespace mfsdp::executor
