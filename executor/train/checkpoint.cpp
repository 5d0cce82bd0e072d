#include "executor/train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>

#include "executor/runtime/context.h"
#include "executor/train/checkpoint_format.h"
#include "executor/train/sharded_optimizer.h"
#include "schema/digest.h"
#include "schema/error.h"
#include "schema/plan_json.h"
#include "schema/plan_loader.h"

namespace mfsdp::executor {
namespace {

namespace fs = std::filesystem;

struct Found {
  int64_t step = 0;
  fs::path path;
};

// "step-00000042" -> 42; anything else (temp directories included) -> nullopt.
std::optional<int64_t> step_of(const std::string& name) {
  const std::string prefix = "step-";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() < 8 || digits.size() > 18) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::stoll(digits);
}

// Hidden names for everything that is not (or no longer) a complete checkpoint: a save in
// progress, a checkpoint being replaced or pruned. Only a leftover of a crash outlives a save.
std::string temp_name(int64_t step, const std::string& why) {
  return "." + checkpoint_name(step) + "." + why + ".tmp";
}

bool is_temp_name(const std::string& name) {
  const std::string suffix = ".tmp";
  return name.rfind(".step-", 0) == 0 && name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Complete checkpoints under `dir`, oldest first: step-N directories whose manifest reads
// and names step N. The others, with why, go to `incomplete` when given.
std::vector<Found> complete_checkpoints(
    const fs::path& dir, std::vector<std::pair<Found, std::string>>* incomplete = nullptr) {
  std::vector<Found> found;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::optional<int64_t> step = step_of(it->path().filename().string());
    if (!step || !it->is_directory(error)) continue;
    std::string why;
    try {
      const int64_t named = read_manifest(it->path().string()).step;
      if (named == *step) {
        found.push_back({*step, it->path()});
        continue;
      }
      why = "its manifest is for step " + std::to_string(named);
    } catch (const Error& e) {
      // No manifest, or a damaged one: not a checkpoint anyone can resume from.
      why = e.what();
    }
    if (incomplete) incomplete->push_back({{*step, it->path()}, why});
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.step < b.step; });
  return found;
}

// Runs this rank's part of a collective operation and returns its error instead of throwing,
// so that every rank reaches the agreement below. Foreign exceptions become `code`.
std::exception_ptr attempt(ExitCode code, const std::string& what,
                           const std::function<void()>& part) {
  try {
    part();
    return nullptr;
  } catch (const Error&) {
    return std::current_exception();
  } catch (const std::exception& e) {
    const std::string text = e.what();
    return std::make_exception_ptr(Error(code, what + ": " + text.substr(0, text.find('\n'))));
  }
}

// A barrier at which every rank learns whether all parts succeeded: a rank whose part failed
// throws its own error, the others one that points at it.
void agree(Context& context, const std::exception_ptr& mine, ExitCode code,
           const std::string& others_failed) {
  const double succeeded = context.mean_over_ranks(mine ? 0.0 : 1.0) * context.world_size();
  if (mine) std::rethrow_exception(mine);
  if (succeeded < context.world_size() - 0.5) fail(code, others_failed);
}

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
  const std::vector<Found> all = complete_checkpoints(root);
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

std::string describe_mesh(const schema::Mesh& m) {
  return "shard " + std::to_string(m.shard_size) + " x replicate " +
         std::to_string(m.replicate_size);
}

// Why a checkpoint's plan is not this run's plan, in a few words, from its plan.json.
std::string plan_difference(const std::string& checkpoint, const schema::Plan& current) {
  const schema::PlanFileReport saved =
      schema::inspect_plan_file(checkpoint + "/" + kPlanFile, schema::PlanCheck::kShape);
  if (!saved.problems.empty()) return "its plan.json is damaged";
  if (saved.plan.model.structural_hash != current.model.structural_hash) {
    return "its model structure differs";
  }
  if (schema::plan_to_json(saved.plan)["units"] != schema::plan_to_json(current)["units"]) {
    return "its units or flat layout differ";
  }
  return "its policy or schedule differs";
}

void check_compatible(const Manifest& manifest, Context& context, const ShardedOptimizer& optimizer,
                      const std::string& checkpoint) {
  const schema::Plan& plan = context.plan();
  const std::string saved_plan = checkpoint + "/" + kPlanFile;
  if (manifest.mesh.world_size != plan.mesh.world_size) {
    fail(ExitCode::kUsage, checkpoint + " was saved by " +
                               std::to_string(manifest.mesh.world_size) +
                               " rank(s) but this run has " + std::to_string(plan.mesh.world_size) +
                               "; resume it with " + std::to_string(manifest.mesh.world_size) +
                               " ranks and " + saved_plan + ", or export it and start a new run");
  }
  if (manifest.mesh.shard_size != plan.mesh.shard_size ||
      manifest.mesh.replicate_size != plan.mesh.replicate_size) {
    fail(ExitCode::kUsage, checkpoint + " was saved with mesh " + describe_mesh(manifest.mesh) +
                               " but this run's plan has " + describe_mesh(plan.mesh) +
                               "; resume it with " + saved_plan);
  }
  const std::string digest = schema::sha256_hex(schema::dump_plan(plan));
  if (digest != manifest.plan_sha256) {
    fail(ExitCode::kUsage, checkpoint + " was saved with another plan (" +
                               plan_difference(checkpoint, plan) + "; plan sha256 " +
                               manifest.plan_sha256.substr(0, 12) + ", this run's " +
                               digest.substr(0, 12) + "); resume it with " + saved_plan);
  }
  const std::string kind = manifest.optimizer.value("kind", "");
  if (kind != optimizer.config().kind) {
    fail(ExitCode::kUsage, checkpoint + " holds " + kind + " optimizer state but this run uses " +
                               optimizer.config().kind + "; resume with the optimizer " + kind);
  }
}

// The part of a load that can fail: everything is read and checked before anything changes.
RankState read_own_part(Context& context, const ShardedOptimizer& optimizer,
                        const std::string& checkpoint, Manifest& manifest) {
  manifest = read_manifest(checkpoint);
  check_compatible(manifest, context, optimizer, checkpoint);
  const auto entry = std::find_if(manifest.ranks.begin(), manifest.ranks.end(),
                                  [&](const RankFileEntry& e) { return e.rank == context.rank(); });
  if (entry == manifest.ranks.end()) {
    fail(ExitCode::kUsage, checkpoint + "/" + kManifestFile + " lists no file for rank " +
                               std::to_string(context.rank()) + "; use another checkpoint");
  }
  // Onto the device this run trains on, whichever one saved it.
  RankState state = read_rank_file(checkpoint, *entry, manifest.step, context.device());
  const std::string file = checkpoint + "/" + entry->file;
  const std::vector<at::Tensor> masters = context.sharded_parameters();
  bool fits = state.shard_names == trainable_group_names(context.plan()) &&
              state.shards.size() == masters.size();
  for (size_t i = 0; fits && i < masters.size(); ++i) {
    fits = state.shards[i].sizes() == masters[i].sizes() &&
           state.shards[i].scalar_type() == masters[i].scalar_type();
  }
  if (!fits) {
    fail(ExitCode::kUsage, file + " holds shards of another layout than its plan says (" +
                               std::to_string(state.shards.size()) + " shards for " +
                               std::to_string(masters.size()) + " groups); use another checkpoint");
  }
  std::vector<std::string> buffer_names;
  for (const auto& buffer : context.model().named_buffers(/*recurse=*/true)) {
    buffer_names.push_back(buffer.name);
  }
  if (state.buffer_names != buffer_names) {
    fail(ExitCode::kUsage,
         file + " holds other model buffers than this model has; use another " + "checkpoint");
  }
  return state;
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
                      write_rank_file(file, collect_rank_state(context, state.step), optimizer);
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

std::string checkpoint_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

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

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  return find_latest_checkpoint(dir).path;
}

LatestCheckpoint find_latest_checkpoint(const std::string& dir) {
  std::vector<std::pair<Found, std::string>> incomplete;
  const std::vector<Found> all = complete_checkpoints(dir, &incomplete);
  LatestCheckpoint latest;
  if (!all.empty()) latest.path = all.back().path.string();
  const int64_t newest = all.empty() ? -1 : all.back().step;
  std::sort(incomplete.begin(), incomplete.end(),
            [](const auto& a, const auto& b) { return a.first.step > b.first.step; });
  for (const auto& [checkpoint, why] : incomplete) {
    if (checkpoint.step > newest) {
      latest.passed_over.push_back(checkpoint.path.string() + " (" + why + ")");
    }
  }
  return latest;
}

TrainingState load_checkpoint(Context& context, ShardedOptimizer& optimizer,
                              const std::string& checkpoint) {
  Manifest manifest;
  RankState state;
  agree(context,
        attempt(ExitCode::kUsage, "cannot load checkpoint " + checkpoint,
                [&] { state = read_own_part(context, optimizer, checkpoint, manifest); }),
        ExitCode::kUsage,
        "checkpoint " + checkpoint +
            " was not loaded: another rank could not load its part (see its error)");

  {
    at::NoGradGuard no_grad;
    const std::vector<at::Tensor> masters = context.sharded_parameters();
    for (size_t i = 0; i < masters.size(); ++i) masters[i].copy_(state.shards[i]);
    size_t b = 0;
    for (const auto& buffer : context.model().named_buffers(/*recurse=*/true)) {
      buffer.value.copy_(state.buffers[b++]);
    }
  }
  optimizer.load(state.optimizer);
  {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state.rng_state.to(at::kCPU));
  }
  if (context.device().is_cuda() && state.device_rng_state.defined()) {
    // Absent when the checkpoint was saved on the CPU: the GPU generator keeps its seed.
    at::Generator generator = at::globalContext().defaultGenerator(context.device());
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state.device_rng_state.to(at::kCPU));
  }
  context.zero_grad();
  TrainingState restored;
  restored.step = manifest.step;
  restored.config = manifest.config;
  return restored;
}

}  // namespace mfsdp::executor
