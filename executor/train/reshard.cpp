#include "executor/train/reshard.h"

#include <algorithm>
#include <filesystem>

#include "executor/train/checkpoint.h"
#include "executor/train/checkpoint_compatibility.h"
#include "executor/train/checkpoint_directory.h"
#include "executor/train/checkpoint_format.h"
#include "executor/train/sharded_optimizer.h"
#include "planner/torchscript/torch_model.h"
#include "schema/digest.h"
#include "schema/error.h"
#include "schema/plan_check.h"
#include "schema/plan_json.h"
#include "schema/plan_loader.h"
#include "schema/plan_rules.h"
#include "schema/shard_map.h"

namespace mfsdp::executor {
namespace {

namespace fs = std::filesystem;

// Saved rank `rank`'s file, on the CPU, checked against the manifest and the saved plan.
RankState read_saved_rank(const SavedCheckpoint& saved, int64_t rank) {
  const auto& ranks = saved.manifest.ranks;
  const auto entry = std::find_if(ranks.begin(), ranks.end(),
                                  [&](const RankFileEntry& e) { return e.rank == rank; });
  if (entry == ranks.end()) {
    fail(ExitCode::kUsage, saved.path + "/" + kManifestFile + " lists no file for rank " +
                               std::to_string(rank) + "; use another checkpoint");
  }
  RankState state = read_rank_file(saved.path, *entry, saved.manifest.step, at::kCPU);
  const std::vector<int64_t> numels = schema::trainable_shard_numels(saved.plan);
  bool fits = state.shard_names == trainable_group_names(saved.plan);
  for (size_t i = 0; fits && i < numels.size(); ++i) {
    fits = state.shards[i].dim() == 1 && state.shards[i].numel() == numels[i];
  }
  if (!fits) {
    fail(ExitCode::kUsage, saved.path + "/" + entry->file +
                               " holds shards of another layout than its plan says; use another "
                               "checkpoint");
  }
  return state;
}

OptimizerConfig optimizer_config(const Manifest& manifest) {
  const nlohmann::ordered_json& o = manifest.optimizer;
  OptimizerConfig config;
  config.kind = o.value("kind", config.kind);
  config.lr = o.value("lr", config.lr);
  config.weight_decay = o.value("weight_decay", config.weight_decay);
  config.momentum = o.value("momentum", config.momentum);
  config.beta1 = o.value("beta1", config.beta1);
  config.beta2 = o.value("beta2", config.beta2);
  config.eps = o.value("eps", config.eps);
  return config;
}

// The optimizer state of a saved rank file, per saved shard (its position in the saved plan's
// sharded parameters).
std::vector<std::optional<ParamOptimizerState>> saved_optimizer_state(const SavedCheckpoint& saved,
                                                                      RankState& state) {
  const std::string file = saved.path + "/" + rank_file_name(state.rank);
  auto states = read_param_states(state.optimizer, file);
  if (states.size() != state.shards.size()) {
    fail(ExitCode::kUsage, file + " holds optimizer state for " + std::to_string(states.size()) +
                               " shards, not " + std::to_string(state.shards.size()) +
                               "; use another checkpoint");
  }
  return states;
}

// Copies the state runs that shard_copies names into `out`, and checks that every saved
// shard agrees on whether there is state, and on its step count.
class OptimizerStateCut {
 public:
  OptimizerStateCut(const std::string& checkpoint, const std::vector<at::Tensor>& target_shards)
      : checkpoint_(checkpoint), shards_(target_shards), out_(target_shards.size()) {}

  void saw(const std::vector<std::optional<ParamOptimizerState>>& states) {
    for (const auto& state : states) {
      if (!state) {
        lacking_ = true;
      } else if (!model_) {
        model_ = state;
      } else if (state->step != model_->step) {
        fail(ExitCode::kUsage, checkpoint_ + " holds optimizer state of different step counts (" +
                                   std::to_string(model_->step) + " and " +
                                   std::to_string(state->step) +
                                   "), which cannot be resharded; resume it with its own plan");
      }
    }
    if (lacking_ && model_) {
      fail(ExitCode::kUsage, checkpoint_ +
                                 " holds optimizer state for some parameters and none for "
                                 "others, which cannot be resharded; resume it with its own plan");
    }
  }

  void copy(const schema::ShardCopy& c, const std::optional<ParamOptimizerState>& from) {
    if (!from) return;
    ParamOptimizerState& to = target(c.to_group);
    for (const auto& [name, tensor] : from->tensors) {
      const auto slot = std::find_if(to.tensors.begin(), to.tensors.end(),
                                     [&](const auto& t) { return t.first == name; });
      slot->second.narrow(0, c.to_offset, c.numel).copy_(tensor.narrow(0, c.from_offset, c.numel));
    }
  }

  // Every shard has state when the checkpoint has any: zeros where no parameter lies.
  std::vector<std::optional<ParamOptimizerState>> finish() {
    if (model_) {
      for (size_t g = 0; g < out_.size(); ++g) target(g);
    }
    return std::move(out_);
  }

 private:
  ParamOptimizerState& target(size_t group) {
    if (!out_[group]) {
      ParamOptimizerState state;
      state.step = model_->step;
      for (const auto& [name, tensor] : model_->tensors) {
        state.tensors.emplace_back(name, at::zeros_like(shards_[group], tensor.options()));
      }
      out_[group] = std::move(state);
    }
    return *out_[group];
  }

  std::string checkpoint_;
  const std::vector<at::Tensor>& shards_;
  std::vector<std::optional<ParamOptimizerState>> out_;
  std::optional<ParamOptimizerState> model_;  // the first saved state seen
  bool lacking_ = false;
};

void take_rank_local_state(RankState& from, ReshardedRank& to) {
  to.buffer_names = std::move(from.buffer_names);
  to.buffers = std::move(from.buffers);
  to.rng_state = from.rng_state;
  to.device_rng_state = from.device_rng_state;
}

std::string mesh_words(const schema::Mesh& mesh) {
  return std::to_string(mesh.world_size) + " rank" + (mesh.world_size == 1 ? "" : "s") +
         " as shard " + std::to_string(mesh.shard_size) + " x replicate " +
         std::to_string(mesh.replicate_size);
}

}  // namespace

SavedCheckpoint open_checkpoint(const std::string& checkpoint) {
  SavedCheckpoint saved;
  saved.path = checkpoint;
  saved.manifest = read_manifest(checkpoint);
  saved.plan = read_checkpoint_plan(checkpoint, saved.manifest);
  return saved;
}

void check_reshardable(const SavedCheckpoint& saved, const schema::Plan& target,
                       const std::string& optimizer_kind) {
  check_same_model_and_optimizer(saved.manifest, saved.path, target.model.structural_hash,
                                 optimizer_kind);
}

ReshardedRank reshard_rank(const SavedCheckpoint& saved, const schema::Plan& target, int64_t rank) {
  const std::vector<schema::ShardCopy> copies =
      schema::shard_copies(saved.plan, target, rank % target.mesh.shard_size);
  ReshardedRank out;
  for (const auto& unit : target.units) {
    for (const auto& group : unit.groups) {
      if (!schema::has_gradient(group)) continue;
      out.shards.push_back(
          at::zeros({group.shard_numel}, at::TensorOptions(planner::scalar_type_of(group.dtype))));
    }
  }
  OptimizerStateCut optimizer(saved.path, out.shards);
  out.source_rank = rank < saved.manifest.mesh.world_size ? rank : 0;
  bool have_rank_local_state = false;

  // One saved rank file in memory at a time: copies are ordered by the shard they read.
  size_t next = 0;
  for (const int64_t from : schema::saved_shards_read(copies)) {
    RankState file = read_saved_rank(saved, from);  // replica 0's shard rank `from`
    const auto states = saved_optimizer_state(saved, file);
    optimizer.saw(states);
    for (; next < copies.size() && copies[next].from_shard == from; ++next) {
      const schema::ShardCopy& c = copies[next];
      out.shards[c.to_group]
          .narrow(0, c.to_offset, c.numel)
          .copy_(file.shards[c.from_group].narrow(0, c.from_offset, c.numel));
      optimizer.copy(c, states[c.from_group]);
    }
    if (from == out.source_rank) {
      take_rank_local_state(file, out);
      have_rank_local_state = true;
    }
  }
  if (!have_rank_local_state) {
    RankState file = read_saved_rank(saved, out.source_rank);
    optimizer.saw(saved_optimizer_state(saved, file));
    take_rank_local_state(file, out);
  }
  out.optimizer = optimizer.finish();
  return out;
}

std::string describe_layout(const schema::Mesh& mesh, const std::string& plan_sha256) {
  return mesh_words(mesh) + ", plan " + plan_sha256.substr(0, 12);
}

ReshardSummary reshard_checkpoint(const std::string& checkpoint, const std::string& plan_path,
                                  const std::string& out_dir) {
  ReshardSummary summary;
  summary.from = resolve_checkpoint(checkpoint, "resharding");
  const SavedCheckpoint saved = open_checkpoint(summary.from);
  const schema::Plan target = schema::load_plan_file(plan_path, schema::PlanCheck::kRules);
  check_reshardable(saved, target, saved.manifest.optimizer.value("kind", ""));
  summary.step = saved.manifest.step;
  const fs::path root(out_dir);
  const fs::path final_path = root / checkpoint_name(summary.step);
  summary.to = final_path.string();
  std::error_code error;
  if (fs::exists(final_path, error)) {
    fail(ExitCode::kUsage, summary.to + " already exists; remove it or choose another -o");
  }
  const std::string plan_text = schema::dump_plan(target);
  Manifest manifest;
  manifest.step = summary.step;
  manifest.mesh = target.mesh;
  manifest.plan_sha256 = schema::sha256_hex(plan_text);
  manifest.model_path = saved.manifest.model_path;
  manifest.model_structural_hash = saved.manifest.model_structural_hash;
  manifest.optimizer = saved.manifest.optimizer;
  manifest.config = saved.manifest.config;
  manifest.resharded_from = {{"checkpoint", fs::absolute(summary.from).lexically_normal().string()},
                             {"mesh",
                              {{"world_size", saved.manifest.mesh.world_size},
                               {"shard_size", saved.manifest.mesh.shard_size},
                               {"replicate_size", saved.manifest.mesh.replicate_size}}},
                             {"plan_sha256", saved.manifest.plan_sha256}};
  summary.from_layout = describe_layout(saved.manifest.mesh, saved.manifest.plan_sha256);
  summary.to_layout = describe_layout(target.mesh, manifest.plan_sha256);

  const fs::path temp = root / temp_name(summary.step, "resharding");
  fs::create_directories(root, error);
  fs::remove_all(temp, error);
  if (!fs::create_directory(temp, error)) {
    fail(ExitCode::kIo, "cannot write " + temp.string() + ": " + error.message());
  }
  try {
    const OptimizerConfig config = optimizer_config(saved.manifest);
    for (int64_t rank = 0; rank < target.mesh.world_size; ++rank) {
      ReshardedRank resharded = reshard_rank(saved, target, rank);
      RankState state;
      state.step = summary.step;
      state.rank = rank;
      state.shard_names = trainable_group_names(target);
      state.shards = resharded.shards;
      state.buffer_names = std::move(resharded.buffer_names);
      state.buffers = std::move(resharded.buffers);
      state.rng_state = resharded.rng_state;
      state.device_rng_state = resharded.device_rng_state;
      auto optimizer = make_optimizer(resharded.shards, config);
      set_param_states(*optimizer, std::move(resharded.optimizer));
      manifest.ranks.push_back(
          write_rank_file((temp / rank_file_name(rank)).string(), state,
                          [&](torch::serialize::OutputArchive& a) { optimizer->save(a); }));
    }
    write_durably((temp / kPlanFile).string(), plan_text);
    write_durably((temp / kManifestFile).string(), dump_manifest(manifest));
    sync_directory(temp.string());
    fs::rename(temp, final_path);
    sync_directory(root.string());
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(temp, error);
    fail(ExitCode::kIo, "cannot write " + summary.to + ": " + e.code().message());
  } catch (...) {
    fs::remove_all(temp, error);
    throw;
  }
  return summary;
}

}  // namespace mfsdp::executor
