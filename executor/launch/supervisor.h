#pragma once
// The fail-fast supervision of launch()'s workers: their output passed on as it comes, every
// worker stopped when one fails or the launcher is interrupted (SIGTERM, the grace period,
// SIGKILL), and the report that names the rank to blame. No LibTorch.

#include <optional>
#include <vector>

#include "executor/launch/launcher.h"
#include "executor/launch/process.h"
#include "executor/launch/rank_output.h"

namespace mfsdp::launch {

class SignalCatcher;

// One started rank: its process, where its output goes, and how it ended once it has.
struct Worker {
  int rank;
  ChildProcess process;
  RankOutput output;
  std::optional<ExitStatus> status;

  // One read per call, so a rank that prints without pause cannot starve the others.
  void read_some(Output stream);
  // Everything there is now: after the worker exited, so its report includes its last words.
  void read_all(Output stream);
};

// Supervises `workers` until every one has exited, and returns what launch() returns
// (launcher.h): 0, the blamed rank's status after a failure, or 128 + the interrupting signal.
int supervise(const LaunchOptions& options, std::vector<Worker>& workers, SignalCatcher& signals,
              const ErrorLines& errors);

}  // namespace mfsdp::launch
