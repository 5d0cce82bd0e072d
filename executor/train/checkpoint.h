#pragma once
// Checkpoints of a training run: every rank's master shards, optimizer state and RNG state,
// plus a manifest, in one directory per step, written so that a crash never leaves a
// checkpoint that looks complete but is not. Layout and guarantees: docs/checkpoints.md.
//
//   TrainingState state;
//   if (auto last = latest_checkpoint("ckpt")) state = load_checkpoint(*ctx, optimizer, *last);
//   for (; state.step < steps; ) {
//     ... one optimizer step, then ctx->zero_grad() ...
//     ++state.step;
//     if (state.step % 100 == 0) save_checkpoint(*ctx, optimizer, "ckpt", state, /*keep=*/3);
//   }

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mfsdp::executor {

class Context;
class ShardedOptimizer;

struct TrainingState {
  int64_t step = 0;       // completed optimizer steps
  nlohmann::json config;  // training flags, recorded for people and sanity checks
  // The model file the run loaded, recorded (made absolute) for export. Empty: the one the
  // context loaded. Not restored by load_checkpoint.
  std::string model_path;
  // Set by load_checkpoint when the checkpoint was saved under another plan of the model and
  // resharded for this one: the saved layout, e.g. "2 ranks as shard 2 x replicate 1, plan
  // 5b0c3e1a9d2f". Empty when it was this run's plan.
  std::string resharded_from;
};

// The directory name of a step's checkpoint: "step-" and at least 8 digits.
std::string checkpoint_name(int64_t step);

// Collective: every rank calls it, between optimizer steps (main gradients are not saved).
// Writes DIR/step-<8 digits>/ (one rank-NNNNN.pt per rank, plan.json, manifest.json) into a
// hidden temp directory that is renamed into place once every rank's file is durable, so DIR
// must be on a filesystem every rank sees. Replaces a checkpoint of the same step, deletes temp
// directories that crashed saves left, then keeps the newest `keep` checkpoints by step plus
// the one just written (0 = keep all). Returns the checkpoint's path. A failure on any rank
// throws Error(kIo) on every rank and leaves the earlier checkpoints as they were.
std::string save_checkpoint(Context& context, ShardedOptimizer& optimizer, const std::string& dir,
                            const TrainingState& state, int keep);

// The newest complete checkpoint under `dir` (a step-N directory with a readable manifest),
// or nullopt when there is none or `dir` does not exist. Temp directories are ignored.
std::optional<std::string> latest_checkpoint(const std::string& dir);

// The same, and the step-N directories newer than it that are not complete checkpoints (no
// manifest, a damaged one, one for another step), newest first, each "PATH (why)": what a
// resume passes over, which the caller must say (a run that silently went back to an older
// step would lose work without anyone noticing).
struct LatestCheckpoint {
  std::optional<std::string> path;
  std::vector<std::string> passed_over;
};
LatestCheckpoint find_latest_checkpoint(const std::string& dir);

// `path` itself when it is a checkpoint (holds a manifest.json), else the newest complete
// checkpoint of the directory `path`, warning on std::cerr about each newer damaged one it
// passes over ("...; <doing> the newest complete one, PATH") when `warn`. Error(kUsage) when
// `path` is neither.
std::string resolve_checkpoint(const std::string& path, const std::string& doing, bool warn = true);

// Collective. Restores this rank's master shards, optimizer state, buffers and the default
// CPU generator (dropout), and returns the saved step and config. A checkpoint saved under
// another plan of the same model (world size, mesh, units, layout, schedule) is resharded
// for this one (reshard.h). Refuses with Error(kUsage), on every rank and before changing
// anything, a checkpoint of another format, model (structural hash) or optimizer kind, and a
// rank file that is missing, truncated or corrupt.
TrainingState load_checkpoint(Context& context, ShardedOptimizer& optimizer,
                              const std::string& checkpoint);

}  // namespace mfsdp::executor
