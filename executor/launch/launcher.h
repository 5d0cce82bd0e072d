#pragma once
// The process launcher of `mfsdp run`: starts one worker process per local rank with
// torchrun's environment, passes on their output, and stops them all as soon as one fails
// (torchrun's fail-fast agent). No LibTorch. See docs/launch.md for what users see.

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace mfsdp::launch {

struct LaunchOptions {
  // The worker program (a path; PATH is not searched) and its arguments. Exec'd, never run
  // through a shell.
  std::vector<std::string> argv;
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  // On node 0 the port must be free to bind on every interface; 0 picks a free one (one node
  // only, since the other nodes could not know it).
  int master_port = 29500;
  // Empty: each line a worker prints goes to this process's stdout or stderr (as the worker
  // printed it), prefixed "[rank N] ". Otherwise: created if missing, and each rank's stdout
  // and stderr go to log_dir/rank-N.log (rank N global); nothing is forwarded.
  std::string log_dir;
  // After SIGTERM, how long workers get to exit before SIGKILL.
  std::chrono::milliseconds grace{std::chrono::seconds(10)};
  // Set in every worker's environment too, after the launch variables (which they must not
  // name).
  std::vector<std::pair<std::string, std::string>> extra_env;
};

// Checks `options` and throws Error(kUsage) with a one-line message naming the flag
// (--nproc-per-node, --nnodes, --node-rank, --master-addr, --master-port, --grace) and the fix.
// launch() calls it first; call it yourself to report bad flags before doing anything else.
void check_options(const LaunchOptions& options);

// Starts nproc_per_node workers, each with this process's environment plus
//   RANK = node_rank * nproc_per_node + local rank,  WORLD_SIZE = nnodes * nproc_per_node,
//   LOCAL_RANK, LOCAL_WORLD_SIZE = nproc_per_node, MASTER_ADDR, MASTER_PORT, and extra_env;
// stdin is /dev/null. Supervises them until all have exited and returns the status this
// process should exit with:
//   0 when every worker exited with 0;
//   the exit code of the first worker that failed (or 128 + the signal that killed it) after
//   stopping the others: SIGTERM, `grace`, then SIGKILL. A summary naming that rank and its
//   last lines of output goes to stderr;
//   130 (SIGINT) or 143 (SIGTERM) when this process is interrupted: the workers are stopped
//   the same way; a second interrupt kills them at once.
// Throws Error(kUsage) for bad options or a port in use on node 0, Error(kIo) when log_dir
// cannot be written, Error(kRuntime) when a worker cannot be started (nothing is left
// running then). Writes to file descriptors 1 and 2 directly: flush std::cout/std::cerr first.
// While it runs it handles SIGINT, SIGTERM, SIGCHLD and SIGPIPE (restored on return); one
// launch at a time per process. Workers are killed if the calling thread dies.
int launch(const LaunchOptions& options);

}  // namespace mfsdp::launch
