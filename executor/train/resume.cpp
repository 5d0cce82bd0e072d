#include "executor/train/resume.h"

#include <iostream>
#include <string>

#include "executor/train/checkpoint.h"
#include "executor/train/trainer.h"
#include "schema/error.h"

namespace mfsdp::executor {

int64_t resume(const TrainConfig& config, Context& context, ShardedOptimizer& optimizer, bool lead,
               std::ostream& out) {
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
  if (found.path) {
    const int64_t step = load_checkpoint(context, optimizer, *found.path).step;
    if (lead) out << "resumed from " << *found.path << " (step " << step << ")" << std::endl;
    return step;
  }
  if (lead) {
    out << "no checkpoint under " << config.checkpoint_dir << " yet; starting at step 0"
        << std::endl;
  }
  return 0;
}

}  // namespace mfsdp::executor
