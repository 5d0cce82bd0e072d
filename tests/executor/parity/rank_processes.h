#pragma once
// Starts one process per rank with torchrun's environment and collects what each printed,
// the way `mfsdp run` or torchrun would start them. No shell; all ranks run concurrently.

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace mfsdp::testing {

struct RankResult {
  int exit_code = -1;  // -1 when killed by a signal (see `signal`)
  int signal = 0;
  std::string out;
  std::string err;
};

struct RankLaunch {
  std::string program;
  std::vector<std::string> args;
  int world_size = 1;
  int master_port = 0;
  bool agent_store = false;  // sets MFSDP_AGENT_STORE=1
  // MFSDP_RDZV_SECRET: a StoreHost's secret(), or any one shared by ranks that host their own.
  std::string secret = "the test ranks' rendezvous secret";
  std::vector<std::pair<std::string, std::string>> extra_env;
  // Every rank still running after this long is killed (SIGKILL, with all it started), so a hang
  // fails the test instead of stalling it.
  std::chrono::milliseconds limit{std::chrono::seconds(30)};
};

// Results in rank order.
std::vector<RankResult> run_ranks(const RankLaunch& launch);

// Every rank's exit code, signal (if any), stdout and stderr, for a failed expectation.
std::string describe(const std::vector<RankResult>& results);

}  // namespace mfsdp::testing
