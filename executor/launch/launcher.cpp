// check_options() and launch() (launcher.h): the checks, then one worker per local rank with
// its environment. The port, log files, signals and supervision are in files of their own.
#include "executor/launch/launcher.h"

#include <unistd.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "executor/launch/log_files.h"
#include "executor/launch/master_port.h"
#include "executor/launch/process.h"
#include "executor/launch/rank_output.h"
#include "executor/launch/signal_catcher.h"
#include "executor/launch/supervisor.h"
#include "schema/error.h"

namespace mfsdp::launch {
namespace {

const char* const kLaunchVariables[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
constexpr long long kMaxWorldSize = 1 << 30;  // what LaunchEnv accepts

}  // namespace

void check_options(const LaunchOptions& o) {
  if (o.argv.empty() || o.argv[0].empty()) {
    fail(ExitCode::kInternal, "launch: no worker program given");
  }
  if (o.nproc_per_node < 1) {
    fail(ExitCode::kUsage, "--nproc-per-node " + std::to_string(o.nproc_per_node) +
                               " is not allowed; start at least 1 process per node");
  }
  if (o.nnodes < 1) {
    fail(ExitCode::kUsage,
         "--nnodes " + std::to_string(o.nnodes) + " is not allowed; give at least 1");
  }
  if (static_cast<long long>(o.nproc_per_node) * o.nnodes > kMaxWorldSize) {
    fail(ExitCode::kUsage, "--nproc-per-node " + std::to_string(o.nproc_per_node) +
                               " times --nnodes " + std::to_string(o.nnodes) +
                               " is more ranks than supported (" + std::to_string(kMaxWorldSize) +
                               "); give fewer");
  }
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    fail(ExitCode::kUsage, "--node-rank " + std::to_string(o.node_rank) +
                               " is out of range for --nnodes " + std::to_string(o.nnodes) +
                               "; use 0.." + std::to_string(o.nnodes - 1));
  }
  if (o.master_addr.empty()) {
    fail(ExitCode::kUsage, "--master-addr is empty; give the host name or address of node 0");
  }
  if (o.master_port < 0 || o.master_port > 65535) {
    fail(ExitCode::kUsage, "--master-port " + std::to_string(o.master_port) +
                               " is out of range; use 1..65535, or 0 to pick a free port");
  }
  if (o.master_port == 0 && o.nnodes > 1) {
    fail(ExitCode::kUsage,
         "--master-port 0 (pick a free port) works only with --nnodes 1, since the other nodes "
         "could not know the port; give every node the same --master-port");
  }
  if (o.grace.count() < 0) {
    fail(ExitCode::kUsage,
         "--grace " + std::to_string(o.grace.count()) + " ms is negative; give 0 or more");
  }
  for (const auto& [name, value] : o.extra_env) {
    if (name.empty() || name.find('=') != std::string::npos) {
      fail(ExitCode::kUsage, "environment variable name '" + name +
                                 "' is not valid; use NAME=VALUE with a NAME without '='");
    }
    for (const char* launch_variable : kLaunchVariables) {
      if (name == launch_variable) {
        fail(ExitCode::kUsage, name +
                                   " is set by the launcher for each rank; do not set it "
                                   "yourself (use the launch flags instead)");
      }
    }
  }
}

int launch(const LaunchOptions& options) {
  check_options(options);
  const int master_port = master_port_for_workers(options);
  LogFiles logs;
  if (!options.log_dir.empty()) {
    logs.open_all(options.log_dir, options.node_rank * options.nproc_per_node,
                  options.nproc_per_node);
  }

  SignalCatcher signals;
  ErrorLines errors;
  std::vector<Worker> workers;
  workers.reserve(static_cast<size_t>(options.nproc_per_node));
  for (int local_rank = 0; local_rank < options.nproc_per_node; ++local_rank) {
    const int rank = options.node_rank * options.nproc_per_node + local_rank;
    std::vector<std::pair<std::string, std::string>> variables = {
        {"RANK", std::to_string(rank)},
        {"WORLD_SIZE", std::to_string(options.nnodes * options.nproc_per_node)},
        {"LOCAL_RANK", std::to_string(local_rank)},
        {"LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node)},
        {"MASTER_ADDR", options.master_addr},
        {"MASTER_PORT", std::to_string(master_port)}};
    variables.insert(variables.end(), options.extra_env.begin(), options.extra_env.end());
    // A worker that cannot start throws; the vector's destructor then kills those started.
    ChildProcess process(options.argv, environment_with(variables));
    RankOutput output =
        options.log_dir.empty()
            ? RankOutput(rank, STDOUT_FILENO, STDERR_FILENO, true, "stdout/stderr", 10, &errors)
            : RankOutput(rank, logs.fd(local_rank), logs.fd(local_rank), false,
                         LogFiles::path(options.log_dir, rank));
    workers.push_back(Worker{rank, std::move(process), std::move(output), std::nullopt});
  }
  return supervise(options, workers, signals, errors);
}

}  // namespace mfsdp::launch
