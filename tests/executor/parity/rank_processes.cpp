#include "tests/executor/parity/rank_processes.h"

#include "executor/launch/process.h"

namespace mfsdp::testing {
namespace {

// The environment of one rank: ours, with the launch variables of that rank.
std::vector<std::string> rank_environment(const RankLaunch& launch, int rank) {
  std::vector<std::pair<std::string, std::string>> set = {
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(launch.master_port)},
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(launch.world_size)},
      {"LOCAL_RANK", std::to_string(rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(launch.world_size)},
      {"MFSDP_AGENT_STORE", launch.agent_store ? "1" : "0"},
      {"MFSDP_RDZV_SECRET", launch.secret},
      {"MFSDP_RDZV_SECRET_FILE", ""}};
  set.insert(set.end(), launch.extra_env.begin(), launch.extra_env.end());
  return mfsdp::launch::environment_with(set);
}

}  // namespace

std::vector<RankResult> run_ranks(const RankLaunch& launch) {
  std::vector<std::string> argv = {launch.program};
  argv.insert(argv.end(), launch.args.begin(), launch.args.end());
  std::vector<mfsdp::launch::ChildProcess> ranks;
  ranks.reserve(static_cast<size_t>(launch.world_size));
  for (int rank = 0; rank < launch.world_size; ++rank) {
    ranks.emplace_back(argv, rank_environment(launch, rank));
  }
  std::vector<RankResult> results;
  for (mfsdp::launch::Finished& rank : mfsdp::launch::finish_all(ranks, launch.limit)) {
    RankResult& result = results.emplace_back();
    result.exit_code = rank.status.signal != 0 ? -1 : rank.status.code;
    result.signal = rank.status.signal;
    result.out = std::move(rank.out);
    result.err = std::move(rank.err);
    if (rank.timed_out && rank.status.signal != 0) {
      result.err += "\n[killed: still running after the test's time limit]";
    }
  }
  return results;
}

std::string describe(const std::vector<RankResult>& results) {
  std::string text;
  for (size_t r = 0; r < results.size(); ++r) {
    text += "--- rank " + std::to_string(r) + " exit " + std::to_string(results[r].exit_code) +
            (results[r].signal ? " signal " + std::to_string(results[r].signal) : "") +
            "\nstdout: " + results[r].out + "stderr: " + results[r].err + "\n";
  }
  return text;
}

}  // namespace mfsdp::testing
