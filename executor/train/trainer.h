#pragma once
// The training loop of `mfsdp run`, on one rank: a context by the plan, the data split over
// ranks and microbatches, the loss, the sharded optimizer with a learning-rate schedule,
// clipping, checkpoints, metrics and a trace. Every rank calls train() with the same config.

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "executor/comm/launch_env.h"
#include "executor/runtime/context.h"
#include "executor/train/data.h"
#include "executor/train/sharded_optimizer.h"

namespace mfsdp::executor {

struct TrainConfig {
  std::string plan_path;
  std::string model_path;
  DataConfig data;  // its global_batch and microbatches are the run's
  // 0: the model's first nn.Embedding's num_embeddings for token data, 256 for text.
  int64_t vocab_size = 0;
  std::string loss = "cross_entropy";
  int64_t steps = 0;
  OptimizerConfig optimizer;
  int64_t warmup_steps = 0;              // linear from lr/warmup to lr
  std::string lr_schedule = "constant";  // constant | cosine (to 10 % of lr at the last step)
  std::optional<double> clip_grad_norm;

  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // 0: only at the end (when checkpoint_dir is set)
  int keep_checkpoints = 2;      // 0: keep all
  bool resume = false;           // continue from the newest complete checkpoint, if any
  // With resume: this checkpoint (a step directory, or the newest complete one of a
  // directory), instead of the newest under checkpoint_dir; it may be another plan's.
  std::string resume_from;
  std::string save_model;  // export the trained model (TorchScript) here at the end

  std::string metrics_path;  // JSON lines, one per step and rank
  std::string trace_path;    // Chrome/Perfetto trace of a window of steps
  int64_t trace_steps = 3;   // traced steps, from the second step on (the first warms up)
  int64_t log_every = 10;
  bool live_progress = false;  // rank 0 redraws one status line ('\r') between log lines
  bool verbose = false;        // a model error in the first batch also prints its traceback
  // LibTorch intra-op threads on this rank, set before the model loads; 0 leaves LibTorch's
  // own choice. Set explicitly because LibTorch 2.x caps OMP_NUM_THREADS at the core count.
  int threads = 0;

  ContextOptions context;

  // The flags that define the run, recorded in checkpoints and compared on resume.
  nlohmann::json describe() const;
};

// Checks what can be checked without a model or other ranks: steps, batch split, schedule
// and optimizer settings. Throws Error(kUsage) naming the flag.
void check_train_config(const TrainConfig& config, int world_size);

// The learning rate of optimizer step `step` (0-based) under warmup and schedule.
double learning_rate(const TrainConfig& config, int64_t step);

// Trains on this rank. Rank 0 prints progress and the summary to `out`. Throws mfsdp::Error.
void train(const TrainConfig& config, const LaunchEnv& env, std::ostream& out);

}  // namespace mfsdp::executor
