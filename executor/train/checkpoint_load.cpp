// load_checkpoint() (checkpoint.h): every rank reads and checks its part, all agree, and only
// then does any rank change its shards, buffers, optimizer and generators.
#include <algorithm>
#include <mutex>
#include <optional>

#include "executor/runtime/context.h"
#include "executor/train/checkpoint.h"
#include "executor/train/checkpoint_compatibility.h"
#include "executor/train/checkpoint_format.h"
#include "executor/train/optimizer_state.h"
#include "executor/train/rank_agreement.h"
#include "executor/train/reshard.h"
#include "executor/train/sharded_optimizer.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

// What a load reads before changing anything: the rank's state as saved, or laid out anew
// for this run's plan.
struct OwnPart {
  Manifest manifest;
  RankState state;
  std::vector<std::optional<ParamOptimizerState>> optimizer_states;  // per sharded parameter
  std::string resharded_from;  // describe_layout of the saved run, when resharded
};

void check_buffers(Context& context, const std::vector<std::string>& names,
                   const std::string& file) {
  std::vector<std::string> buffer_names;
  for (const auto& buffer : context.model().named_buffers(/*recurse=*/true)) {
    buffer_names.push_back(buffer.name);
  }
  if (names != buffer_names) {
    fail(ExitCode::kUsage,
         file + " holds other model buffers than this model has; use another " + "checkpoint");
  }
}

// Saved under another plan of the same model: this rank's part cut from replica 0's files.
void read_resharded(Context& context, const SavedCheckpoint& saved, OwnPart& part) {
  const std::string& checkpoint = saved.path;
  ReshardedRank resharded = reshard_rank(saved, context.plan(), context.rank());
  check_buffers(context, resharded.buffer_names,
                checkpoint + "/" + rank_file_name(resharded.source_rank));
  part.state.shards = std::move(resharded.shards);
  part.state.buffers = std::move(resharded.buffers);
  part.state.rng_state = resharded.rng_state;
  part.state.device_rng_state = resharded.device_rng_state;
  part.optimizer_states = std::move(resharded.optimizer);
  part.resharded_from = describe_layout(saved.manifest.mesh, saved.manifest.plan_sha256);
}

// The part of a load that can fail: everything is read and checked before anything changes.
void read_own_part(Context& context, const ShardedOptimizer& optimizer,
                   const std::string& checkpoint, OwnPart& part) {
  // Every reader of a checkpoint (resume, reshard, export) opens it the same way: the manifest,
  // then plan.json checked against its digest and the plan rules, whether or not it is used.
  const SavedCheckpoint saved = open_checkpoint(checkpoint);
  part.manifest = saved.manifest;
  if (check_compatible(part.manifest, context, optimizer, checkpoint) == CheckpointFit::kReshard) {
    read_resharded(context, saved, part);
    return;
  }
  const Manifest& manifest = part.manifest;
  const auto entry = std::find_if(manifest.ranks.begin(), manifest.ranks.end(),
                                  [&](const RankFileEntry& e) { return e.rank == context.rank(); });
  if (entry == manifest.ranks.end()) {
    fail(ExitCode::kUsage, checkpoint + "/" + kManifestFile + " lists no file for rank " +
                               std::to_string(context.rank()) + "; use another checkpoint");
  }
  // Onto the device this run trains on, whichever one saved it.
  RankState& state = part.state;
  state = read_rank_file(checkpoint, *entry, manifest.step, context.device());
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
  check_buffers(context, state.buffer_names, file);
  part.optimizer_states = read_param_states(state.optimizer, file);
  if (part.optimizer_states.size() != masters.size()) {
    fail(ExitCode::kUsage, file + " holds optimizer state for " +
                               std::to_string(part.optimizer_states.size()) + " shards, not " +
                               std::to_string(masters.size()) + "; use another checkpoint");
  }
}

}  // namespace

TrainingState load_checkpoint(Context& context, ShardedOptimizer& optimizer,
                              const std::string& checkpoint) {
  OwnPart part;
  agree(context,
        attempt(ExitCode::kUsage, "cannot load checkpoint " + checkpoint,
                [&] { read_own_part(context, optimizer, checkpoint, part); }),
        ExitCode::kUsage,
        "checkpoint " + checkpoint +
            " was not loaded: another rank could not load its part (see its error)");
  const RankState& state = part.state;

  {
    at::NoGradGuard no_grad;
    const std::vector<at::Tensor> masters = context.sharded_parameters();
    for (size_t i = 0; i < masters.size(); ++i) masters[i].copy_(state.shards[i]);
    size_t b = 0;
    for (const auto& buffer : context.model().named_buffers(/*recurse=*/true)) {
      buffer.value.copy_(state.buffers[b++]);
    }
  }
  set_param_states(optimizer.optimizer(), std::move(part.optimizer_states));
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
  restored.step = part.manifest.step;
  restored.config = part.manifest.config;
  restored.resharded_from = part.resharded_from;
  return restored;
}

}  // namespace mfsdp::executor
