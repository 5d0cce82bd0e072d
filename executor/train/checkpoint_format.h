#pragma once
// The files of one checkpoint directory, shared by saving (checkpoint.cpp), loading
// (checkpoint_load.cpp) and export (export.cpp): manifest.json (written last), plan.json (the plan,
// byte for byte as schema::dump_plan writes it) and one rank-NNNNN.pt per rank. Described in
// docs/checkpoints.md.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "executor/train/manifest.h"
#include "executor/train/sharded_optimizer.h"
#include "schema/plan.h"

namespace mfsdp::executor {

std::string rank_file_name(int64_t rank);  // "rank-00003.pt"
// Reads checkpoint/manifest.json with parse_manifest. Error(kUsage) naming the checkpoint when
// manifest.json is missing or unreadable, and what parse_manifest throws.
Manifest read_manifest(const std::string& checkpoint);

// The checkpoint's plan.json, checked against its sha256 in the manifest, every rule of
// `mfsdp validate` and the manifest's mesh. Error(kUsage) naming the file and the damage.
schema::Plan read_checkpoint_plan(const std::string& checkpoint, const Manifest& manifest);

// The name a trainable group's shard has in rank files: "<unit> group <g>".
std::string shard_name(const schema::Unit& unit, size_t group);
// Shard names of every trainable group of the plan, in plan order (the order of
// Context::sharded_parameters()).
std::vector<std::string> trainable_group_names(const schema::Plan& plan);

// What one rank file holds.
struct RankState {
  int64_t step = 0;
  int64_t rank = 0;
  std::vector<std::string> shard_names;
  std::vector<at::Tensor> shards;  // this rank's fp32 master shards
  std::vector<std::string> buffer_names;
  std::vector<at::Tensor> buffers;  // the rank's model buffers
  at::Tensor rng_state;             // the default CPU generator
  at::Tensor device_rng_state;      // the training GPU's default generator; undefined on the CPU
  torch::serialize::InputArchive optimizer;  // read back only; ShardedOptimizer::load takes it
};

// Writes a rank file with `state` (its `optimizer` unused) and the optimizer state that
// `save_optimizer` writes (ShardedOptimizer::save, or a LibTorch optimizer's save), fsyncs it
// and returns its entry. Error(kIo) naming the path when it cannot be written.
using OptimizerWriter = std::function<void(torch::serialize::OutputArchive&)>;
RankFileEntry write_rank_file(const std::string& path, const RankState& state,
                              const OptimizerWriter& save_optimizer);
// Checks the file against its manifest entry (present, same size, same sha256) and reads it,
// onto `device` if given, else where the tensors were saved. Error(kUsage) naming the file and
// what is wrong.
RankState read_rank_file(const std::string& checkpoint, const RankFileEntry& entry, int64_t step,
                         c10::optional<at::Device> device = c10::nullopt);

// A rank file's shards and buffers, mapped rather than read (planner/torchscript/
// mapped_archive.h): export streams them out without holding them. Checked as read_rank_file
// checks it; the optimizer state and RNG are not read.
struct MappedRankFile {
  int64_t rank = 0;
  std::vector<std::string> shard_names;
  std::vector<at::Tensor> shards;
  std::vector<std::string> buffer_names;
  std::vector<at::Tensor> buffers;
};
MappedRankFile map_rank_file(const std::string& checkpoint, const RankFileEntry& entry,
                             int64_t step);

// Writes `bytes` to `path` and fsyncs it; Error(kIo) naming the path.
void write_durably(const std::string& path, const std::string& bytes);
// fsync of a directory, so the entries made in it survive a crash (best effort).
void sync_directory(const std::string& dir);

}  // namespace mfsdp::executor
