#include "executor/train/checkpoint_compatibility.h"

#include "executor/runtime/context.h"
#include "executor/train/sharded_optimizer.h"
#include "schema/digest.h"
#include "schema/error.h"
#include "schema/plan_json.h"

namespace mfsdp::executor {

void check_same_model_and_optimizer(const Manifest& manifest, const std::string& checkpoint,
                                    const std::string& structural_hash,
                                    const std::string& optimizer_kind) {
  const std::string kind = manifest.optimizer.value("kind", "");
  if (kind != optimizer_kind) {
    fail(ExitCode::kUsage, checkpoint + " holds " + kind + " optimizer state but this run uses " +
                               optimizer_kind + "; resume with the optimizer " + kind);
  }
  if (manifest.model_structural_hash != structural_hash) {
    fail(ExitCode::kUsage, checkpoint + " was saved for another model (structural hash " +
                               manifest.model_structural_hash.substr(0, 12) + ", this plan's " +
                               structural_hash.substr(0, 12) +
                               "); resume it with a plan of the model it trained, " +
                               manifest.model_path);
  }
}

CheckpointFit check_compatible(const Manifest& manifest, Context& context,
                               const ShardedOptimizer& optimizer, const std::string& checkpoint) {
  const schema::Plan& plan = context.plan();
  check_same_model_and_optimizer(manifest, checkpoint, plan.model.structural_hash,
                                 optimizer.config().kind);
  return schema::sha256_hex(schema::dump_plan(plan)) == manifest.plan_sha256
             ? CheckpointFit::kSamePlan
             : CheckpointFit::kReshard;
}

}  // namespace mfsdp::executor
