// Communicators across real processes: each rank is a copy of mfsdp_comm_worker on 127.0.0.1
// that checks its own results. The test process hosts the store as torchrun's agent does
// (StoreHost on port 0, then MFSDP_AGENT_STORE=1 and MASTER_PORT=its port for the ranks), so
// no port can be taken in between; one test lets rank 0 host it on a port that was free.

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "executor/comm/rendezvous.h"
#include "executor/runtime/cpu_stream.h"
#include "schema/error.h"
#include "tests/cli/subprocess.h"
#include "tests/executor/parity/rank_processes.h"

namespace mfsdp::executor {
namespace {

using namespace std::chrono_literals;
using testing::describe;
using testing::RankLaunch;
using testing::RankResult;

// Runs `scenario` on `world` ranks against a store this test hosts.
std::vector<RankResult> run_scenario(const std::string& scenario, int world,
                                     std::chrono::milliseconds timeout = 10s) {
  StoreHost host(0);
  RankLaunch launch;
  launch.program = MFSDP_COMM_WORKER;
  launch.args = {scenario, "--timeout-ms", std::to_string(timeout.count())};
  launch.world_size = world;
  launch.master_port = host.port();
  launch.secret = host.secret();
  launch.agent_store = true;
  return testing::run_ranks(launch);
}

void expect_all_ok(const std::vector<RankResult>& results, const std::string& scenario) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << describe(results);
    EXPECT_NE(results[r].out.find("rank " + std::to_string(r) + " ok: " + scenario),
              std::string::npos)
        << describe(results);
  }
}

class CollectivesOnRanks : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesOnRanks, MatchWhatEachRankComputesItself) {
  expect_all_ok(run_scenario("collectives", GetParam()), "collectives");
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesOnRanks, ::testing::Values(1, 2, 3, 4, 5),
                         [](const auto& info) { return std::to_string(info.param); });

TEST(Collectives, AllGatherAndReduceScatterOverlapOnTwoStreams) {
  expect_all_ok(run_scenario("overlap", 2, 5s), "overlap");
}

// Rank 0 hosts the store here, as under a plain MASTER_ADDR/MASTER_PORT launch: it must keep
// the store up while the other pair is still connecting through it.
TEST(Collectives, SubgroupsReduceWithinTheirGroupWhileRankZeroHostsTheStore) {
  RankLaunch launch;
  launch.program = MFSDP_COMM_WORKER;
  launch.args = {"subgroups"};
  launch.world_size = 4;
  launch.master_port = testing::free_port();
  launch.agent_store = false;
  expect_all_ok(testing::run_ranks(launch), "subgroups");
}

TEST(Collectives, RankExitingDuringACollectiveFailsTheOthersWithinTheTimeout) {
  const auto timeout = 3s;
  const std::vector<RankResult> results = run_scenario("die", 3, timeout);
  EXPECT_EQ(results[2].exit_code, 42) << describe(results);
  for (int r = 0; r < 2; ++r) {
    const RankResult& rank = results[r];
    EXPECT_EQ(rank.exit_code, static_cast<int>(ExitCode::kRuntime)) << describe(results);
    EXPECT_NE(
        rank.err.find("rank " + std::to_string(r) + ": reduce-scatter of grads on grads failed: "),
        std::string::npos)
        << describe(results);
    std::smatch took;
    ASSERT_TRUE(std::regex_search(rank.out, took, std::regex("failed after ([0-9]+) ms")))
        << describe(results);
    EXPECT_LE(std::stoi(took[1]), std::chrono::milliseconds(timeout).count() + 1000)
        << describe(results);
  }
}

TEST(Collectives, RankThatNeverJoinsMakesTheOthersTimeOut) {
  const auto timeout = 1s;
  const std::vector<RankResult> results = run_scenario("stall", 2, timeout);
  const RankResult& waiting = results[0];
  EXPECT_EQ(waiting.exit_code, static_cast<int>(ExitCode::kRuntime)) << describe(results);
  EXPECT_NE(waiting.err.find("rank 0: reduce-scatter of grads on grads failed: "),
            std::string::npos)
      << describe(results);
  EXPECT_NE(waiting.err.find("imed out"), std::string::npos) << describe(results);
  std::smatch took;
  ASSERT_TRUE(std::regex_search(waiting.out, took, std::regex("failed after ([0-9]+) ms")))
      << describe(results);
  EXPECT_GE(std::stoi(took[1]), 900) << describe(results);
  EXPECT_LE(std::stoi(took[1]), 2500) << describe(results);
  // The stalled rank's own collective fails once the other has given up and left.
  EXPECT_EQ(results[1].exit_code, static_cast<int>(ExitCode::kRuntime)) << describe(results);
  EXPECT_NE(results[1].err.find("all-reduce of stalled rank on grads failed"), std::string::npos)
      << describe(results);
}

// In-process: a world of one, or ranks that never come.

LaunchEnv agent_env(const StoreHost& host, int rank, int world) {
  LaunchEnv env;
  env.master_port = host.port();
  env.rank = rank;
  env.world_size = world;
  env.agent_store = true;
  env.secret = host.secret();
  return env;
}

TEST(Rendezvous, NamesRanksThatDidNotJoin) {
  StoreHost host(0);
  try {
    Rendezvous rendezvous(agent_env(host, 0, 3), 300ms);
    FAIL() << "rendezvous without ranks 1 and 2 succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_EQ(std::string(e.what()),
              "rank 0: joining the other ranks via the rendezvous store at 127.0.0.1:" +
                  std::to_string(host.port()) +
                  " failed: rank(s) 1,2 did not arrive within 300 ms");
  }
}

TEST(Rendezvous, NamesTheStoreItCannotReach) {
  LaunchEnv env;
  env.master_port = testing::free_port();
  env.rank = 1;
  env.world_size = 2;
  env.secret = new_rendezvous_secret();
  try {
    Rendezvous rendezvous(env, 300ms);
    FAIL() << "rendezvous without a store succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1: cannot reach the rendezvous store at 127.0.0.1:" +
                                         std::to_string(env.master_port)),
              std::string::npos)
        << e.what();
  }
}

TEST(Rendezvous, SingleRankCommunicatorWorksLocally) {
  StoreHost host(0);
  Rendezvous rendezvous(agent_env(host, 0, 1), 5s);
  EXPECT_EQ(rendezvous.exchange("k", "v"), std::vector<std::string>{"v"});
  auto stream = make_cpu_stream("solo");
  auto comm = rendezvous.gloo_communicator("solo", {0}, *stream, 1s);
  const std::vector<float> in = {1, 2, 3};
  std::vector<float> out(3), gathered(3);
  comm->reduce_scatter(in.data(), out.data(), 3, ReduceOp::kAvg, "reduce-scatter");
  comm->all_gather(in.data(), gathered.data(), 3 * sizeof(float), "all-gather");
  stream->synchronize();
  EXPECT_EQ(out, in);
  EXPECT_EQ(gathered, in);
}

TEST(Rendezvous, RejectsGroupsWithoutThisRankAndReusedNames) {
  StoreHost host(0);
  Rendezvous rendezvous(agent_env(host, 0, 1), 5s);
  auto stream = make_cpu_stream("s");
  try {
    rendezvous.gloo_communicator("none", {}, *stream, 1s);
    FAIL() << "a group without this rank was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "rank 0: communicator 'none' over ranks {}: this rank is not a member");
  }
  auto first = rendezvous.gloo_communicator("twice", {0}, *stream, 1s);
  EXPECT_THROW(rendezvous.gloo_communicator("twice", {0}, *stream, 1s), Error);
}

}  // namespace
}  // namespace mfsdp::executor
