// save_checkpoint() (checkpoint.h): every rank writes its file into a hidden temp directory,
// rank 0 adds the plan and manifest and renames it into place, then prunes the oldest. The
// directory's listing, loading and the agreement between ranks are in files of their own.
#include "executor/train/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <mutex>

#include "executor/runtime/context.h"
#include "executor/train/checkpoint_directory.h"
#include "executor/train/checkpoint_format.h"
#include "executor/train/rank_agreement.h"
#include "executor/train/sharded_optimizer.h"
#include "schema/digest.h"
#include "schema/error.h"
#include "schema/plan_json.h"

namespace mfsdp::executor {
namespace {

namespace fs = std::filesystem;

RankState collect_rank_state(Context& context, int64_t step) {
  RankState state;
  state.step = step;
  state.rank = context.rank();
  state.shard_names = trainable_group_names(context.plan());
  for (const at::Tensor& shard : context.sharded_parameters()) state.shards.push_back(shard);
  for (const auto& buffer : context.model().named_buffers(/*recurse=*/true)) {
    state.buffer_names.push_back(buffer.name);
    state.buffers.push_back(buffer.value);
  }
  {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    state.rng_state = generator.get_state();
  }
  if (context.device().is_cuda()) {
    // Dropout and other random ops on the GPU draw from the device's generator.
    at::Generator generator = at::globalContext().defaultGenerator(context.device());
    std::lock_guard<std::mutex> lock(generator.mutex());
    state.device_rng_state = generator.get_state();
  }
  return state;
}

nlohmann::ordered_json optimizer_json(const OptimizerConfig& c) {
  return {{"kind", c.kind},
          {"lr", c.lr},
          {"weight_decay", c.weight_decay},
          {"momentum", c.momentum},
          {"beta1", c.beta1},
          {"beta2", c.beta2},
          {"eps", c.eps}};
}

// Rank 0, once every rank's file is durable in `temp`: plan, manifest, rename into place.
void publish(Context& context, ShardedOptimizer& optimizer, const TrainingState& state,
             const fs::path& root, const fs::path& temp, const fs::path& target) {
  const schema::Plan& plan = context.plan();
  Manifest manifest;
  manifest.step = state.step;
  manifest.mesh = plan.mesh;
  manifest.model_path =
      fs::absolute(state.model_path.empty() ? context.model_path() : state.model_path).string();
  manifest.model_structural_hash = plan.model.structural_hash;
  manifest.optimizer = optimizer_json(optimizer.config());
  manifest.config = state.config.is_null() ? nlohmann::json::object() : state.config;
  for (int r = 0; r < context.world_size(); ++r) {
    // Each rank left its file's size and sha256 next to it; rank 0 cannot see into the
    // others' memory, only into the shared directory.
    const fs::path note = temp / (rank_file_name(r) + ".json");
    std::error_code error;
    if (!fs::exists(note, error) || !fs::exists(temp / rank_file_name(r), error)) {
      fail(ExitCode::kIo, "rank " + std::to_string(r) + "'s checkpoint file is not visible in " +
                              temp.string() +
                              " from rank 0; checkpoints need a directory every rank shares");
    }
    std::ifstream in(note);
    manifest.ranks.push_back(
        rank_entry_from_json(nlohmann::ordered_json::parse(in), note.string()));
    fs::remove(note);
  }
  const std::string plan_text = schema::dump_plan(plan);
  manifest.plan_sha256 = schema::sha256_hex(plan_text);
  write_durably((temp / kPlanFile).string(), plan_text);
  write_durably((temp / kManifestFile).string(), dump_manifest(manifest));
  sync_directory(temp.string());

  // rename() cannot replace a non-empty directory: move an older save of this step aside.
  const fs::path replaced = root / temp_name(state.step, "replaced");
  const bool replacing = fs::exists(target);
  if (replacing) {
    fs::remove_all(replaced);
    fs::rename(target, replaced);
  }
  fs::rename(temp, target);
  sync_directory(root.string());
  if (replacing) fs::remove_all(replaced);
}

// Keeps the newest `keep` complete checkpoints by step, and the one just saved.
void prune(const fs::path& root, int keep, int64_t saved_step) {
  if (keep == 0) return;
  const std::vector<FoundCheckpoint> all = complete_checkpoints(root);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) {
    if (all[i].step == saved_step) continue;
    // Renamed first, so a crash mid-delete leaves a temp directory, not a broken checkpoint.
    const fs::path doomed = root / temp_name(all[i].step, "pruned");
    fs::remove_all(doomed);
    fs::rename(all[i].path, doomed);
    fs::remove_all(doomed);
  }
}

void remove_temp_directories(const fs::path& root) {
  for (const auto& entry : fs::directory_iterator(root)) {
    if (is_temp_name(entry.path().filename().string())) fs::remove_all(entry.path());
  }
}

// The second and third parts of save_checkpoint: every rank's file, then rank 0 publishes.
void save_into_temp(Context& context, ShardedOptimizer& optimizer, const TrainingState& state,
                    const fs::path& root, const fs::path& temp, const fs::path& target, int keep,
                    const std::string& what, const std::string& others) {
  const bool leader = context.rank() == 0;
  // Every rank writes its file, then a note with its size and sha256 for rank 0.
  agree(context,
        attempt(ExitCode::kIo, what,
                [&] {
                  const std::string file = (temp / rank_file_name(context.rank())).string();
                  const RankFileEntry entry =
                      write_rank_file(file, collect_rank_state(context, state.step),
                                      [&](auto& archive) { optimizer.save(archive); });
                  write_durably(file + ".json", rank_entry_to_json(entry).dump());
                }),
        ExitCode::kIo, others);
  // Rank 0 completes the checkpoint; the rename is what makes it visible.
  agree(context,
        attempt(ExitCode::kIo, what,
                [&] {
                  if (!leader) return;
                  publish(context, optimizer, state, root, temp, target);
                  prune(root, keep, state.step);
                }),
        ExitCode::kIo, others);
}

}  // namespace

std::string save_checkpoint(Context& context, ShardedOptimizer& optimizer, const std::string& dir,
                            const TrainingState& state, int keep) {
  if (keep < 0 || state.step < 0) {
    fail(ExitCode::kUsage, "save_checkpoint: keep (" + std::to_string(keep) + ") and step (" +
                               std::to_string(state.step) + ") must not be negative");
  }
  const fs::path root(dir);
  const fs::path target = root / checkpoint_name(state.step);
  const fs::path temp = root / temp_name(state.step, "saving");
  const bool leader = context.rank() == 0;
  const std::string what = "cannot save checkpoint " + target.string();
  const std::string others = "checkpoint " + target.string() +
                             " was not saved: another rank failed (see its error); earlier "
                             "checkpoints are unchanged";

  // Rank 0 clears what crashed saves left behind and makes the temp directory.
  agree(context,
        attempt(ExitCode::kIo, what,
                [&] {
                  if (!leader) return;
                  fs::create_directories(root);
                  remove_temp_directories(root);
                  fs::create_directory(temp);
                }),
        ExitCode::kIo, others);
  // A save that fails from here on (a full disk) leaves nothing behind: every rank has agreed
  // that it failed, so rank 0 removes the temp directory. Earlier checkpoints are untouched.
  try {
    save_into_temp(context, optimizer, state, root, temp, target, keep, what, others);
  } catch (...) {
    std::error_code ignored;
    if (leader) fs::remove_all(temp, ignored);
    throw;
  }
  return target.string();
}

}  // namespace mfsdp::executor
