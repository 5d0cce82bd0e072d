#include "cli/rank_launch.h"

#include <limits.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "cli/duration_flag.h"
#include "cli/whole_number.h"
#include "executor/comm/launch_env.h"
#include "executor/launch/external_launch.h"
#include "schema/error.h"

namespace mfsdp::cli {
namespace {

struct WholeRange {
  int64_t min;
  int64_t max;
  std::string words;  // for errors: "it must be <words>"
};

// Ranks, ports and threads have the bounds of Gloo, NCCL, TCP and the OS.
WholeRange launcher_range(const std::string& flag) {
  const std::string int32_max = std::to_string(INT32_MAX);
  if (flag == "--nnodes") return {1, INT32_MAX, "from 1 to " + int32_max};
  if (flag == "--node-rank") return {0, INT32_MAX - 1, "from 0 to --nnodes - 1"};
  if (flag == "--master-port") return {0, 65535, "from 1 to 65535, or 0 to pick a free port"};
  return {1, 65536, "from 1 to 65536"};  // --threads
}

std::string self_executable() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) fail(ExitCode::kInternal, "cannot find this program's path in /proc/self/exe");
  path[n] = '\0';
  return path;
}

// The cores this process may run on (its affinity mask, which containers and `taskset`
// narrow), at least 1.
int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

// Each worker's intra-op threads, as torchrun sizes them: --threads, else the user's
// OMP_NUM_THREADS (inherited as it is), else the cores shared out among this node's workers,
// so that N workers do not each start a pool as large as the machine. LibTorch reads
// OMP_NUM_THREADS and the BLAS libraries their own variables when a worker starts.
void set_worker_threads(const LauncherFlags& flags, launch::LaunchOptions& options) {
  const char* user = std::getenv("OMP_NUM_THREADS");
  if (flags.threads == 0 && user != nullptr && *user != '\0') return;
  const int threads =
      flags.threads > 0 ? flags.threads : std::max(1, available_cores() / flags.nproc_per_node);
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}) {
    options.extra_env.push_back({name, std::to_string(threads)});
  }
}

}  // namespace

void add_launcher_flags(CLI::App& cmd, LauncherFlags& flags, const std::string& nproc_default) {
  const char* group = "Launcher";
  flags.nproc_default = nproc_default;
  const auto whole = [&](const std::string& name, const std::string& help) {
    cmd.add_option(name, flags.whole[name], help)->type_name("INT")->group(group);
  };
  whole("--nproc-per-node", "Workers to start on this node (default: " + nproc_default + ")");
  whole("--nnodes", "Number of nodes (default 1)");
  whole("--node-rank", "This node's index, 0..nnodes-1 (default 0)");
  cmd.add_option("--master-addr", flags.master_addr,
                 "Host of rank 0's rendezvous store (default 127.0.0.1)")
      ->group(group);
  whole("--master-port",
        "Its TCP port, 1..65535 (default 29500; 0 picks a free one on a single "
        "node)");
  cmd.add_option("--rdzv-bind", flags.rdzv_bind,
                 "Address rank 0's store listens on (default: --master-addr, so loopback on one "
                 "node; 0.0.0.0 for every interface)")
      ->group(group);
  cmd.add_option("--log-dir", flags.log_dir,
                 "Write each rank's output to DIR/rank-N.log instead of prefixing it")
      ->group(group);
  cmd.add_option("--grace", flags.grace_s,
                 "Seconds workers get after SIGTERM before SIGKILL (default 10)")
      ->group(group);
  whole("--threads",
        "Intra-op threads per worker, for LibTorch and BLAS, 1..65536 (default: OMP_NUM_THREADS "
        "if set, else this node's cores / its workers, at least 1)");
}

void read_launcher_flags(LauncherFlags& flags, const CLI::App& cmd) {
  const auto read = [&](const std::string& flag, int& field) {
    if (cmd.count(flag) == 0) return;
    const WholeRange range = flag == "--nproc-per-node"
                                 ? WholeRange{1, INT32_MAX,
                                              "from 1 to " + std::to_string(INT32_MAX) +
                                                  " (or left out: " + flags.nproc_default + ")"}
                                 : launcher_range(flag);
    field = static_cast<int>(
        whole_number(flags.whole.at(flag), flag, range.min, range.max, range.words));
  };
  read("--nproc-per-node", flags.nproc_per_node);
  read("--nnodes", flags.nnodes);
  read("--node-rank", flags.node_rank);
  read("--master-port", flags.master_port);
  read("--threads", flags.threads);
}

void check_launch_flags(const LauncherFlags& flags, const CLI::App& cmd) {
  if (cmd.count("--master-addr") > 0 && flags.master_addr.empty()) {
    fail(ExitCode::kUsage,
         "--master-addr is empty; give node 0's host name or address (127.0.0.1 by default)");
  }
}

bool join_as_rank(const LauncherFlags& flags) {
  const auto external =
      launch::external_worker_env(launch::current_environment(), flags.master_addr,
                                  flags.master_port > 0 ? flags.master_port : 0);
  if (!external) return false;
  // Our own workers get the launcher's arguments back, --nproc-per-node included.
  const char* ours = std::getenv("MFSDP_RUN_WORKER");
  if (flags.nproc_per_node != 0 && !(ours && std::string(ours) == "1")) {
    fail(ExitCode::kUsage,
         "this process was started as one rank by another launcher (RANK, SLURM_PROCID or "
         "OMPI_COMM_WORLD_RANK is set), so --nproc-per-node does not apply; drop it");
  }
  for (const auto& [name, value] : *external) setenv(name.c_str(), value.c_str(), 1);
  if (!flags.rdzv_bind.empty()) setenv("MFSDP_RDZV_BIND", flags.rdzv_bind.c_str(), 1);
  return true;
}

int env_threads() {
  const char* value = std::getenv("OMP_NUM_THREADS");
  if (value == nullptr) return 0;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || errno != 0 || n < 1 || n > 65536) return 0;
  return static_cast<int>(n);
}

launch::LaunchOptions rank_launch_options(const LauncherFlags& flags, int argc, char** argv,
                                          const std::string& command) {
  launch::LaunchOptions options;
  options.argv.push_back(self_executable());
  for (int i = 1; i < argc; ++i) options.argv.push_back(argv[i]);
  options.nproc_per_node = flags.nproc_per_node;
  options.nnodes = flags.nnodes;
  options.node_rank = flags.node_rank;
  if (!flags.master_addr.empty()) options.master_addr = flags.master_addr;
  if (flags.master_port >= 0) options.master_port = flags.master_port;
  options.log_dir = flags.log_dir;
  options.grace = seconds_flag(flags.grace_s, "--grace", true);
  options.extra_env.push_back({"MFSDP_RUN_WORKER", "1"});
  // The rendezvous secret: the user's, checked here once, else a fresh one for this launch.
  // Only a single-node launcher may make it up, since every node must hold the same one.
  // Checked after the launcher's own flags, so that a node rank out of range is named first.
  launch::check_options(options);
  if (!executor::rendezvous_secret_from_environment()) {
    if (flags.nnodes > 1) {
      fail(ExitCode::kUsage,
           "a " + command + " over --nnodes " + std::to_string(flags.nnodes) +
               " needs a rendezvous secret that every node shares: export "
               "MFSDP_RDZV_SECRET=$(openssl rand -hex 32) with the same value on each node "
               "before mfsdp " +
               command + " (docs/launch.md, Security)");
    }
    options.extra_env.push_back({"MFSDP_RDZV_SECRET", executor::new_rendezvous_secret()});
  }
  if (!flags.rdzv_bind.empty()) options.extra_env.push_back({"MFSDP_RDZV_BIND", flags.rdzv_bind});
  set_worker_threads(flags, options);
  return options;
}

void check_output_directory(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  std::filesystem::path directory = std::filesystem::path(path).parent_path();
  if (directory.empty()) directory = ".";
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    fail(ExitCode::kIo, flag + " " + path + ": the directory " + directory.string() +
                            " does not exist; create it first");
  }
  if (::access(directory.c_str(), W_OK) != 0) {
    fail(ExitCode::kIo, flag + " " + path + ": cannot write into " + directory.string() + " (" +
                            std::strerror(errno) + ")");
  }
}

}  // namespace mfsdp::cli
