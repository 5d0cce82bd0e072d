#include "executor/train/checkpoint_compatibility.h"

#include "executor/runtime/context.h"
#include "executor/train/sharded_optimizer.h"
#include "schema/digest.h"
#include "schema/error.h"
#include "schema/plan_json.h"
#include "schema/plan_loader.h"

namespace mfsdp::executor {
namespace {

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

}  // namespace

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

}  // namespace mfsdp::executor
