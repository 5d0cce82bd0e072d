#include "executor/train/checkpoint_compatibility.h"

#include "executor/runtime/context.h"
#include "executor/train/sharded_optimizer.h"
#include "schema/digest.h"
#include "schema/error.h"
#include "schema/plan_json.h"
#include "schema/plan_loader.h"

namespace mfsdp::executor {

CheckpointFit check_compatible(const Manifest& manifest, Context& context,
                               const ShardedOptimizer& optimizer, const std::string& checkpoint) {
  const schema::Plan& plan = context.plan();
  const std::string kind = manifest.optimizer.value("kind", "");
  if (kind != optimizer.config().kind) {
    fail(ExitCode::kUsage, checkpoint + " holds " + kind + " optimizer state but this run uses " +
                               optimizer.config().kind + "; resume with the optimizer " + kind);
  }
  if (schema::sha256_hex(schema::dump_plan(plan)) == manifest.plan_sha256) {
    return CheckpointFit::kSamePlan;
  }
  if (manifest.model_structural_hash != plan.model.structural_hash) {
    fail(ExitCode::kUsage, checkpoint + " was saved for another model (structural hash " +
                               manifest.model_structural_hash.substr(0, 12) + ", this plan's " +
                               plan.model.structural_hash.substr(0, 12) +
                               "); resume it with a plan of the model it trained, " +
                               manifest.model_path);
  }
  return CheckpointFit::kReshard;
}

}  // namespace mfsdp::executor
