#pragma once
// What the checkpoint tests share: plans for the tied_lm fixture, scratch directories, and
// training runs of mfsdp_checkpoint_worker on real rank processes.

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "tests/executor/parity/parity_config.h"   // fixture_path
#include "tests/executor/parity/rank_processes.h"  // describe

namespace mfsdp::testing {

// An empty directory of its own under the test temp dir.
std::string fresh_dir(const std::string& name);
// Plans tests/fixtures/tied_lm.pt (units layers.0, layers.1, <root>) into DIR/NAME.
std::string plan_tied_lm(const std::string& dir, const std::string& name, int world,
                         int prefetch = 1);

struct WorkerRun {
  std::string plan;
  int world = 2;
  int steps = 1;
  std::string out;  // rank 0's final full parameters and losses (save_parity_result)
  std::string dir;  // checkpoints; with save_every
  int save_every = 0;
  int keep = 0;
  std::string resume;
  bool reseed = false;
};
std::vector<RankResult> run_workers(const WorkerRun& run);

// Trains `steps` steps on 2 ranks and saves at the last one; returns the checkpoint's path.
// `params` (if given) gets the full parameters at that step.
std::string trained_checkpoint(const std::string& dir, int steps,
                               std::map<std::string, at::Tensor>* params = nullptr);

// Number of newline characters: one-line messages have exactly one.
size_t line_count(const std::string& text);

}  // namespace mfsdp::testing
