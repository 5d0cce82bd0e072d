// load_checkpoint() (checkpoint.h): every rank reads and checks its part, all agree, and only
// then does any rank change its shards, buffers, optimizer and generators.
#include <algorithm>
#include <mutex>

#include "executor/runtime/context.h"
#include "executor/train/checkpoint.h"
#include "executor/train/checkpoint_compatibility.h"
#include "executor/train/checkpoint_format.h"
#include "executor/train/rank_agreement.h"
#include "executor/train/sharded_optimizer.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

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

}  // namespace

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
