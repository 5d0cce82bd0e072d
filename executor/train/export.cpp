#include "executor/train/export.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "executor/train/checkpoint.h"
#include "executor/train/checkpoint_format.h"
#include "executor/train/reshard.h"
#include "planner/torchscript/model_check.h"
#include "planner/torchscript/torch_model.h"
#include "schema/digest.h"
#include "schema/error.h"
#include "schema/plan_check.h"
#include "schema/plan_json.h"
#include "schema/plan_loader.h"
#include "schema/plan_rules.h"

namespace mfsdp::executor {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

ExportSummary export_model(const std::string& checkpoint_arg, const std::string& out_path,
                           const std::string& model_path) {
  ExportSummary summary;
  summary.checkpoint = resolve_checkpoint(checkpoint_arg, "exporting");
  const std::string& checkpoint = summary.checkpoint;
  const SavedCheckpoint saved = open_checkpoint(checkpoint);  // as resume and reshard open it
  const Manifest& manifest = saved.manifest;
  summary.step = manifest.step;
  const schema::Plan& plan = saved.plan;

  summary.model_path = model_path.empty() ? manifest.model_path : model_path;
  std::error_code error;
  if (model_path.empty() && !fs::exists(summary.model_path, error)) {
    fail(ExitCode::kUsage, checkpoint + " was trained from " + summary.model_path +
                               ", which does not exist any more; pass the model file with --model");
  }
  torch::jit::Module module = planner::load_module(summary.model_path);
  planner::require_plan_fits_model(
      plan, planner::extract_model(module, summary.model_path), summary.model_path,
      "the plan of " + checkpoint,
      {"pass the model file the run trained with --model",
       "the checkpoint's plan.json was edited or damaged (its structural hash still matches the "
       "model); use another checkpoint"});

  // Replica 0 holds every shard once: ranks 0 .. shard_size-1 are its shard ranks in order.
  const std::vector<std::string> names = trainable_group_names(plan);
  std::vector<const schema::Group*> trainable;
  for (const auto& unit : plan.units) {
    for (const auto& group : unit.groups) {
      if (schema::has_gradient(group)) trainable.push_back(&group);
    }
  }
  std::vector<std::vector<at::Tensor>> shards(names.size());
  RankState first;
  for (int64_t rank = 0; rank < plan.mesh.shard_size; ++rank) {
    const auto entry = std::find_if(manifest.ranks.begin(), manifest.ranks.end(),
                                    [&](const RankFileEntry& e) { return e.rank == rank; });
    if (entry == manifest.ranks.end()) {
      fail(ExitCode::kUsage, checkpoint + "/" + kManifestFile + " lists no file for rank " +
                                 std::to_string(rank) + "; use another checkpoint");
    }
    // On the CPU, whatever device training ran on: export needs no accelerator.
    RankState state = read_rank_file(checkpoint, *entry, manifest.step, at::kCPU);
    if (state.shard_names != names) {
      fail(ExitCode::kUsage, checkpoint + "/" + entry->file +
                                 " holds shards of another layout than its plan says; use "
                                 "another checkpoint");
    }
    for (size_t i = 0; i < names.size(); ++i) {
      const at::Tensor& shard = state.shards[i];
      if (shard.dim() != 1 || shard.numel() != trainable[i]->shard_numel) {
        fail(ExitCode::kUsage, checkpoint + "/" + entry->file + " holds " +
                                   std::to_string(shard.numel()) + " elements of " + names[i] +
                                   ", its plan " + std::to_string(trainable[i]->shard_numel) +
                                   " per rank; use another checkpoint");
      }
      shards[i].push_back(shard);
    }
    if (rank == 0) first = std::move(state);
  }

  std::map<std::string, at::Tensor> params;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) params[p.name] = p.value;
  at::NoGradGuard no_grad;
  size_t next = 0;
  for (const auto& unit : plan.units) {
    for (size_t g = 0; g < unit.groups.size(); ++g) {
      const schema::Group& group = unit.groups[g];
      if (!schema::has_gradient(group)) continue;  // frozen: the model file's values stand
      const at::Tensor full = at::cat(shards[next++]);
      if (full.numel() != group.padded_numel) {
        fail(ExitCode::kUsage, checkpoint + ": the shards of " + shard_name(unit, g) + " hold " +
                                   std::to_string(full.numel()) + " elements, its plan " +
                                   std::to_string(group.padded_numel) + "; use another checkpoint");
      }
      for (const auto& p : group.params) {
        const at::Tensor value = full.narrow(0, p.offset, p.numel).view(p.shape);
        // Aliases are the same tensor in the module: writing it in place keeps them tied.
        params.at(p.name).copy_(value);
      }
    }
  }
  std::map<std::string, at::Tensor> buffers;
  for (const auto& b : module.named_buffers(/*recurse=*/true)) buffers[b.name] = b.value;
  for (size_t i = 0; i < first.buffer_names.size(); ++i) {
    const auto it = buffers.find(first.buffer_names[i]);
    if (it != buffers.end() && it->second.sizes() == first.buffers[i].sizes()) {
      it->second.copy_(first.buffers[i]);
    }
  }

  std::ostringstream bytes;
  module.save(bytes, {{"mfsdp_checkpoint.json", read_text(checkpoint + "/" + kManifestFile)}});
  schema::write_file_atomically(out_path, bytes.str());
  return summary;
}

}  // namespace mfsdp::executor
