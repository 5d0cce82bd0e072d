#include "executor/train/resume.h"

#include <iostream>
#include <optional>
#include <string>

#include "executor/runtime/context.h"
#include "executor/train/checkpoint.h"
#include "executor/train/reshard.h"
#include "executor/train/trainer.h"
#include "schema/digest.h"
#include "schema/error.h"
#include "schema/plan_json.h"

namespace mfsdp::executor {

std::optional<std::string> checkpoint_to_resume(const TrainConfig& config, bool lead) {
  if (!config.resume_from.empty()) {
    return resolve_checkpoint(config.resume_from, "resuming from", /*warn=*/lead);
  }
  const LatestCheckpoint found = find_latest_checkpoint(config.checkpoint_dir);
  if (!found.path && !found.passed_over.empty()) {
    // Starting over would save new steps beside the damaged ones: refuse, say what is there.
    fail(ExitCode::kUsage, "--resume: " + config.checkpoint_dir +
                               " holds no complete checkpoint, only " + found.passed_over.front() +
                               "; repair or remove it, or run without --resume to start at "
                               "step 0");
  }
  if (lead) {
    for (const std::string& skipped : found.passed_over) {
      std::cerr << "mfsdp: warning: --resume passes over " << skipped
                << ", which is not a complete checkpoint; resuming from the newest complete "
                   "one, "
                << *found.path << std::endl;
    }
  }
  return found.path;
}

int64_t resume(const TrainConfig& config, const std::optional<std::string>& checkpoint,
               Context& context, ShardedOptimizer& optimizer, bool lead, std::ostream& out) {
  if (checkpoint) {
    const TrainingState state = load_checkpoint(context, optimizer, *checkpoint);
    if (lead) {
      out << "resumed from " << *checkpoint << " (step " << state.step << ")";
      if (!state.resharded_from.empty()) {
        const schema::Plan& plan = context.plan();
        out << ", resharded from " << state.resharded_from << " to "
            << describe_layout(plan.mesh, schema::sha256_hex(schema::dump_plan(plan)));
      }
      out << std::endl;
    }
    return state.step;
  }
  if (lead) {
    out << "no checkpoint under " << config.checkpoint_dir << " yet; starting at step 0"
        << std::endl;
  }
  return 0;
}

}  // namespace mfsdp::executor
