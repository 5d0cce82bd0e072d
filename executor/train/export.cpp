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
#include "planner/torchscript/mapped_archive.h"
#include "planner/torchscript/model_check.h"
#include "planner/torchscript/torch_model.h"
#include "safetensors/safetensors.h"
#include "schema/digest.h"
#include "schema/error.h"
#include "schema/model_path.h"
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

namespace {

// The model the manifest names, found as a plan's model is: an absolute path as it is, a
// relative one (a manifest edited by hand) beside the manifest, else, with a warning, from the
// current directory.
std::string recorded_model(const std::string& checkpoint, const Manifest& manifest) {
  const std::string manifest_path = checkpoint + "/" + kManifestFile;
  const schema::ModelLocation model = schema::locate_model(manifest.model_path, manifest_path);
  if (model.from_current_directory) {
    std::cerr << "mfsdp: warning: " << manifest_path << " names model " << manifest.model_path
              << ", which is not beside the checkpoint; using " << model.path
              << " in the current directory; pass --model to be sure\n";
  }
  std::error_code error;
  if (!fs::is_regular_file(model.path, error)) {
    fail(ExitCode::kUsage, checkpoint + " was trained from " + model.path +
                               ", which does not exist any more (or is not a file); pass the "
                               "model file with --model");
  }
  return model.path;
}

// The model's bytes must be the ones the plan was made from: its frozen parameters are
// exported as they are, and a file replaced since (retrained, re-saved, another model of the
// same shapes) would pass the structural check. A model the user names with --model is their
// choice, and only warned about.
void check_model_content(const std::string& path, const schema::Plan& plan,
                         const std::string& checkpoint, bool recorded) {
  if (plan.model.sha256.empty()) return;  // a plan that records no content hash
  const std::string sha256 = schema::sha256_file_hex(path);
  if (sha256 == plan.model.sha256) return;
  const std::string hashes = "(sha256 " + sha256.substr(0, 12) + ", the plan records " +
                             plan.model.sha256.substr(0, 12) + ")";
  if (recorded) {
    fail(ExitCode::kUsage, checkpoint + " was trained from " + path +
                               ", which has changed since its plan was made " + hashes +
                               "; pass the model file the run trained with --model");
  }
  std::cerr << "mfsdp: warning: --model " << path
            << " is not the file the checkpoint's plan was made from " << hashes
            << "; exporting with its code and frozen tensors, as asked\n";
}

// What both formats start from: the checkpoint, opened as resume opens it, and the model it
// was trained from (mapped: its tensors are read only where export reads them), which must be
// of the checkpoint plan's structure.
struct ExportSource {
  ExportSummary summary;
  SavedCheckpoint saved;
  torch::jit::Module module;
};

ExportSource open_export(const std::string& checkpoint_arg, const std::string& model_path) {
  ExportSource source;
  ExportSummary& summary = source.summary;
  summary.checkpoint = resolve_checkpoint(checkpoint_arg, "exporting");
  const std::string& checkpoint = summary.checkpoint;
  source.saved = open_checkpoint(checkpoint);  // as resume and reshard open it
  const Manifest& manifest = source.saved.manifest;
  summary.step = manifest.step;
  summary.model_path = model_path.empty() ? recorded_model(checkpoint, manifest) : model_path;
  source.module = planner::load_module(summary.model_path);
  planner::require_plan_fits_model(
      source.saved.plan, planner::extract_model(source.module, summary.model_path),
      summary.model_path, "the plan of " + checkpoint,
      {"pass the model file the run trained with --model",
       "the checkpoint's plan.json was edited or damaged (its structural hash still matches the "
       "model); use another checkpoint"});
  // Another model is told by its structure first; one of the same structure by its bytes.
  check_model_content(summary.model_path, source.saved.plan, checkpoint, model_path.empty());
  return source;
}

const RankFileEntry& rank_entry(const std::string& checkpoint, const Manifest& manifest,
                                int64_t rank) {
  const auto entry = std::find_if(manifest.ranks.begin(), manifest.ranks.end(),
                                  [&](const RankFileEntry& e) { return e.rank == rank; });
  if (entry == manifest.ranks.end()) {
    fail(ExitCode::kUsage, checkpoint + "/" + kManifestFile + " lists no file for rank " +
                               std::to_string(rank) + "; use another checkpoint");
  }
  return *entry;
}

}  // namespace

ExportSummary export_model(const std::string& checkpoint_arg, const std::string& out_path,
                           const std::string& model_path) {
  ExportSource source = open_export(checkpoint_arg, model_path);
  if (planner::first_tensor_without_data(source.module)) {
    fail(ExitCode::kUsage, source.summary.model_path +
                               " is a skeleton (saved from the meta device, no values), and a "
                               "TorchScript export writes every tensor of the model; pass the "
                               "full model file with --model, or export --format safetensors");
  }
  const ExportSummary& summary = source.summary;
  const std::string& checkpoint = summary.checkpoint;
  const Manifest& manifest = source.saved.manifest;
  const schema::Plan& plan = source.saved.plan;
  torch::jit::Module& module = source.module;

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
    const RankFileEntry* entry = &rank_entry(checkpoint, manifest, rank);
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

namespace mfsdp::executor {
namespace {

// One output tensor as the ranges of mapped tensors its bytes come from, in order.
struct StreamedTensor {
  std::string name;
  safetensors::Dtype dtype;
  std::vector<int64_t> shape;
  std::vector<at::Tensor> pieces;  // 1-d slices of shards (mapped) or a whole frozen value
};

safetensors::Dtype file_dtype(c10::ScalarType type, const std::string& what) {
  const std::string name = planner::dtype_name_of(type, what);
  const auto dtype = safetensors::dtype_from_schema(name);
  if (!dtype) fail(ExitCode::kUsage, what + " is " + name + ", which safetensors cannot hold");
  return *dtype;
}

}  // namespace

ExportSummary export_safetensors(const std::string& checkpoint_arg, const std::string& out_dir,
                                 int64_t max_file_bytes, const std::string& model_path) {
  ExportSource source = open_export(checkpoint_arg, model_path);
  ExportSummary& summary = source.summary;
  const std::string& checkpoint = summary.checkpoint;
  const Manifest& manifest = source.saved.manifest;
  const schema::Plan& plan = source.saved.plan;

  // Replica 0's shard ranks hold every shard once, mapped: a slice is read when it is written.
  const std::vector<std::string> names = trainable_group_names(plan);
  std::vector<MappedRankFile> ranks;
  for (int64_t rank = 0; rank < plan.mesh.shard_size; ++rank) {
    const RankFileEntry& entry = rank_entry(checkpoint, manifest, rank);
    ranks.push_back(map_rank_file(checkpoint, entry, manifest.step));
    if (ranks.back().shard_names != names) {
      fail(ExitCode::kUsage, checkpoint + "/" + entry.file +
                                 " holds shards of another layout than its plan says; use "
                                 "another checkpoint");
    }
  }
  std::map<std::string, at::Tensor> frozen;
  for (const auto& p : source.module.named_parameters(/*recurse=*/true)) frozen[p.name] = p.value;

  std::vector<StreamedTensor> out;
  size_t next = 0;
  for (const auto& unit : plan.units) {
    for (size_t g = 0; g < unit.groups.size(); ++g) {
      const schema::Group& group = unit.groups[g];
      const bool trainable = schema::has_gradient(group);
      const size_t shard = trainable ? next++ : 0;
      // Each shard rank's slice of this group, checked against the plan once.
      std::vector<at::Tensor> slices;
      for (int64_t r = 0; trainable && r < plan.mesh.shard_size; ++r) {
        const at::Tensor& values = ranks[static_cast<size_t>(r)].shards[shard];
        if (values.dim() != 1 || values.numel() != group.shard_numel ||
            values.scalar_type() != planner::scalar_type_of(group.dtype)) {
          fail(ExitCode::kUsage, checkpoint + "/" + rank_file_name(r) + " holds " +
                                     std::to_string(values.numel()) + " elements of " +
                                     shard_name(unit, g) + ", its plan " +
                                     std::to_string(group.shard_numel) + " of " + group.dtype +
                                     " per rank; use another checkpoint");
        }
        slices.push_back(values);
      }
      for (const auto& p : group.params) {
        StreamedTensor tensor{p.name, {}, p.shape, {}};
        if (!trainable) {  // frozen: the model file's values stand
          if (planner::has_no_data(frozen.at(p.name))) {
            fail(ExitCode::kUsage, summary.model_path + " is a skeleton with no value for the " +
                                       "frozen parameter " + p.name +
                                       " (the checkpoint holds only trained ones); pass the "
                                       "model file it came from with --model");
          }
          const at::Tensor value = frozen.at(p.name).contiguous().reshape({-1});
          tensor.dtype = file_dtype(value.scalar_type(), p.name);
          tensor.pieces.push_back(value);
          out.push_back(std::move(tensor));
          continue;
        }
        tensor.dtype = file_dtype(planner::scalar_type_of(group.dtype), p.name);
        for (size_t r = 0; r < slices.size(); ++r) {
          const int64_t begin = static_cast<int64_t>(r) * group.shard_numel;
          const int64_t lo = std::max(begin, p.offset);
          const int64_t hi = std::min(begin + group.shard_numel, p.offset + p.numel);
          if (hi > lo) tensor.pieces.push_back(slices[r].narrow(0, lo - begin, hi - lo));
        }
        out.push_back(std::move(tensor));
      }
    }
  }
  const MappedRankFile& first = ranks.front();
  for (size_t i = 0; i < first.buffer_names.size(); ++i) {
    const at::Tensor value = first.buffers[i].contiguous();
    out.push_back({first.buffer_names[i],
                   file_dtype(value.scalar_type(), first.buffer_names[i]),
                   value.sizes().vec(),
                   {value.reshape({-1})}});
  }

  safetensors::ShardedWriter writer(out_dir, static_cast<uint64_t>(max_file_bytes));
  for (const StreamedTensor& tensor : out) writer.declare(tensor.name, tensor.dtype, tensor.shape);
  for (const StreamedTensor& tensor : out) {
    for (const at::Tensor& piece : tensor.pieces) {
      writer.write(tensor.name, piece.data_ptr(), piece.nbytes());
      planner::release_mapped_pages(piece);  // written: its pages go back
    }
  }
  writer.finish();
  summary.files = writer.file_names();
  return summary;
}

}  // namespace mfsdp::executor
