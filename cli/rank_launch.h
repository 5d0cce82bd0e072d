#pragma once
// What `mfsdp run` and `mfsdp probe` share as launchers: the launcher flags, whether this
// process is one rank started by a launcher (ours or torchrun, srun, mpirun), and the options
// that start this program once per local rank (executor/launch/launcher.h).

#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include "executor/launch/launcher.h"

namespace mfsdp::cli {

struct LauncherFlags {
  int nproc_per_node = 0;  // 0: not given
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = -1;   // -1: not given
  std::string rdzv_bind;  // empty: rank 0 listens on --master-addr
  std::string log_dir;
  double grace_s = 10;
  int threads = 0;  // 0: OMP_NUM_THREADS if set, else the cores shared out among the workers
  // The whole-number flags as typed, by name; read_launcher_flags checks and stores them
  // (CLI11 would clamp a value beyond 64 bits).
  std::map<std::string, std::string> whole;
  std::string nproc_default;  // what a left-out --nproc-per-node means, for its help and errors
};

// Adds the "Launcher" group to `cmd`: --nproc-per-node (whose default `nproc_default` names),
// --nnodes, --node-rank, --master-addr, --master-port, --rdzv-bind, --log-dir, --grace and
// --threads.
void add_launcher_flags(CLI::App& cmd, LauncherFlags& flags, const std::string& nproc_default);

// Checks each whole-number launcher flag given against its range (docs/run.md#whole-number-
// flags) and stores it; Error(kUsage) naming the flag otherwise.
void read_launcher_flags(LauncherFlags& flags, const CLI::App& cmd);

// Launcher flags that no value of another flag can make right; Error(kUsage).
void check_launch_flags(const LauncherFlags& flags, const CLI::App& cmd);

// When this process is one rank (our launcher's worker, or one started by torchrun, srun or
// mpirun): sets torchrun's variables and MFSDP_RDZV_BIND from the flags and returns true.
// Error(kUsage) for --nproc-per-node under another launcher.
bool join_as_rank(const LauncherFlags& flags);

// OMP_NUM_THREADS as a worker found it (set by our launcher, or by the user for another
// launcher), 0 when unset or not a positive whole number (LibTorch then chooses).
int env_threads();

// The launch of this program's `argv` once per local rank of this node: the launcher flags,
// the rendezvous secret (the user's, else a fresh one on a single node; `command` names the
// command in the error when several nodes have none), --rdzv-bind, each worker's threads and
// MFSDP_RUN_WORKER=1. Checked (launch::check_options). flags.nproc_per_node must be set.
launch::LaunchOptions rank_launch_options(const LauncherFlags& flags, int argc, char** argv,
                                          const std::string& command);

// A file a rank will write, checked before any rank starts: its directory must exist and be
// writable. Error(kIo) naming `flag`, the path and the fix.
void check_output_directory(const std::string& flag, const std::string& path);

}  // namespace mfsdp::cli
