// `mfsdp run` under the real launchers, as users start it (docs/launch.md): torchrun (static and
// c10d rendezvous, one node and two), the store of an older torch, and Open MPI's mpirun must
// train bit for bit what mfsdp's own launcher trains, and print plain lines into the
// launchers' pipes. MFSDP_TORCHRUN names a torchrun (torch >= 2.1), MFSDP_TORCH_LEGACY_PYTHON
// a Python whose torch is 2.0 or earlier (its store speaks the protocol before VALIDATE), and
// MFSDP_MPIRUN an mpirun. Without them these tests skip and say so; scripts/check-launchers
// sets all three up and runs them.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_support.h"
#include "tests/run/metrics_losses.h"

namespace mfsdp::testing {
namespace {

const char kSecret[] = "0123456789abcdef0123456789abcdef";

std::string env_value(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::string two_rank_plan(const std::string& name) {
  const std::string path = temp_path(name + ".plan.json");
  const RunResult r = mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit",
                             "layers.*", "--unit", "<root>", "-o", path, "-q"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

// The flags of every run here; `out` names its metrics and saved model.
std::vector<std::string> torchrun_test_flags(const std::string& plan, const std::string& out) {
  return {"run",
          plan,
          "--data",
          kRepo + "/examples/tiny_corpus.txt",
          "--seq-len",
          "16",
          "--global-batch",
          "12",
          "--steps",
          "4",
          "--optimizer",
          "adamw",
          "--threads",
          "1",
          "--seed",
          "3",
          "--metrics",
          out + ".jsonl",
          "--save-model",
          out + ".pt"};
}

bool has_control_bytes(const std::string& text) {
  for (char c : text) {
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') || c == 0x7f) return true;
  }
  return false;
}

// What mfsdp's own launcher trains with the same flags: the reference.
struct OwnLaunch {
  std::map<int64_t, double> losses;
  std::string model;
};

OwnLaunch own_launcher(const std::string& plan, const std::string& name) {
  const std::string out = temp_path(name + "_own");
  std::vector<std::string> args = torchrun_test_flags(plan, out);
  args.insert(args.end(), {"--nproc-per-node", "2", "--master-port", "0"});
  const RunResult r = mfsdp(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return {rank0_losses(out + ".jsonl"), read_file(out + ".pt")};
}

void expect_same_training(const RunResult& r, const std::string& out, const OwnLaunch& reference) {
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(rank0_losses(out + ".jsonl"), reference.losses);
  EXPECT_EQ(reference.losses.size(), 4u);
  EXPECT_TRUE(read_file(out + ".pt") == reference.model) << "the saved models differ";
  EXPECT_NE(r.out.find("done: 4 steps"), std::string::npos) << r.out;
  EXPECT_FALSE(has_control_bytes(r.out)) << r.out;
}

class Torchrun : public ::testing::Test {
 protected:
  void SetUp() override {
    torchrun_ = env_value("MFSDP_TORCHRUN");
    if (torchrun_.empty()) {
      GTEST_SKIP() << "MFSDP_TORCHRUN is not set: give it a torchrun of torch >= 2.1 "
                      "(scripts/check-launchers does)";
    }
    setenv("MFSDP_RDZV_SECRET", kSecret, 1);
  }
  void TearDown() override { unsetenv("MFSDP_RDZV_SECRET"); }

  RunResult torchrun(const std::vector<std::string>& rendezvous, const std::string& plan,
                     const std::string& out) {
    std::vector<std::string> args = {"--no-python", "--nproc-per-node", "2"};
    args.insert(args.end(), rendezvous.begin(), rendezvous.end());
    args.push_back(MFSDP_BINARY);
    const std::vector<std::string> flags = torchrun_test_flags(plan, out);
    args.insert(args.end(), flags.begin(), flags.end());
    return run_program(torchrun_, args, kRepo);
  }

  std::string torchrun_;
};

// torchrun's agent hosts a TCPStore on --master-port; the workers must use it, not host one.
TEST_F(Torchrun, StaticRendezvousTrainsWhatTheOwnLauncherTrains) {
  const std::string plan = two_rank_plan("torchrun_static");
  const OwnLaunch reference = own_launcher(plan, "torchrun_static");
  const std::string out = temp_path("torchrun_static");
  const RunResult r = torchrun({"--master-port", std::to_string(free_port())}, plan, out);
  expect_same_training(r, out, reference);
}

TEST_F(Torchrun, C10dRendezvousTrainsWhatTheOwnLauncherTrains) {
  const std::string plan = two_rank_plan("torchrun_c10d");
  const OwnLaunch reference = own_launcher(plan, "torchrun_c10d");
  const std::string out = temp_path("torchrun_c10d");
  const RunResult r = torchrun(
      {"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:" + std::to_string(free_port())},
      plan, out);
  expect_same_training(r, out, reference);
}

// Two nodes as two torchrun agents on this host, one rank each: node 1's agent joins node 0's.
TEST_F(Torchrun, TwoNodesOfOneRankEachTrainWhatTheOwnLauncherTrains) {
  const std::string plan = two_rank_plan("torchrun_nodes");
  const OwnLaunch reference = own_launcher(plan, "torchrun_nodes");
  const std::string out = temp_path("torchrun_nodes");
  const std::string port = std::to_string(free_port());
  std::vector<RunResult> nodes(2);
  std::vector<std::thread> agents;
  for (int node = 0; node < 2; ++node) {
    agents.emplace_back([&, node] {
      std::vector<std::string> args = {
          "--no-python",        "--nnodes",         "2",  "--node-rank",
          std::to_string(node), "--nproc-per-node", "1",  "--master-addr",
          "127.0.0.1",          "--master-port",    port, MFSDP_BINARY};
      const std::vector<std::string> flags = torchrun_test_flags(plan, out);
      args.insert(args.end(), flags.begin(), flags.end());
      nodes[node] = run_program(torchrun_, args, kRepo);
    });
  }
  for (std::thread& t : agents) t.join();
  EXPECT_EQ(nodes[1].exit_code, 0) << nodes[1].out << nodes[1].err;
  expect_same_training(nodes[0], out, reference);
}

// torchrun --max-restarts 1 restarts every worker when one dies; they must carry on from the
// newest complete checkpoint by themselves and end where an uninterrupted run ends.
TEST_F(Torchrun, AWorkerKilledMidRunResumesFromTheNewestCheckpointBitExactly) {
  const std::string plan = two_rank_plan("torchrun_restart");
  const std::vector<std::string> longer = {"--steps", "20", "--checkpoint-every", "2"};
  const std::string own = temp_path("torchrun_restart_own");
  std::vector<std::string> args = torchrun_test_flags(plan, own);
  args.insert(args.end(), longer.begin(), longer.end());
  args.insert(args.end(),
              {"--checkpoint-dir", own + "_ckpt", "--nproc-per-node", "2", "--master-port", "0"});
  std::filesystem::remove_all(own + "_ckpt");
  const RunResult uninterrupted = mfsdp(args);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.err;

  const std::string out = temp_path("torchrun_restart");
  const std::string checkpoints = out + "_ckpt";
  std::filesystem::remove_all(checkpoints);
  setenv("FAIL_ONCE_AFTER", (checkpoints + "/step-00000004").c_str(), 1);
  args = {"--no-python",
          "--nproc-per-node",
          "2",
          "--max-restarts",
          "1",
          "--master-port",
          std::to_string(free_port()),
          kRepo + "/tests/run/fail_once_worker.sh",
          MFSDP_BINARY};
  const std::vector<std::string> flags = torchrun_test_flags(plan, out);
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), longer.begin(), longer.end());
  args.insert(args.end(), {"--checkpoint-dir", checkpoints});
  const RunResult r = run_program(torchrun_, args, kRepo);
  unsetenv("FAIL_ONCE_AFTER");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("fail_once_worker: killed rank 1 after"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("mfsdp run: torchrun restart 1 of at most 1: resuming from the newest "
                       "complete checkpoint in " +
                       checkpoints),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("resumed from " + checkpoints + "/step-"), std::string::npos) << r.out;
  EXPECT_TRUE(read_file(out + ".pt") == read_file(own + ".pt")) << "the saved models differ";
}

// What a worker that torchrun restarted is told, without torchrun: its variables, one rank.
TEST(TorchrunRestart, WithoutACheckpointDirectoryTheWorkerWarnsItStartsAgain) {
  const std::string plan = temp_path("restart_one.plan.json");
  ASSERT_EQ(mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "1", "--unit", "layers.*",
                   "--unit", "<root>", "-o", plan, "-q"})
                .exit_code,
            0);
  const std::map<std::string, std::string> torchrun_env = {{"RANK", "0"},
                                                           {"WORLD_SIZE", "1"},
                                                           {"MASTER_ADDR", "127.0.0.1"},
                                                           {"MASTER_PORT", "1"},
                                                           {"TORCHELASTIC_RESTART_COUNT", "2"},
                                                           {"TORCHELASTIC_MAX_RESTARTS", "3"}};
  for (const auto& [name, value] : torchrun_env) setenv(name.c_str(), value.c_str(), 1);
  const std::string out = temp_path("restart_one");
  const std::string checkpoints = out + "_ckpt";
  std::filesystem::remove_all(checkpoints);
  const RunResult fresh = mfsdp(torchrun_test_flags(plan, out));
  std::vector<std::string> with_dir = torchrun_test_flags(plan, out);
  with_dir.insert(with_dir.end(), {"--checkpoint-dir", checkpoints});
  const RunResult first = mfsdp(with_dir);   // no checkpoint there yet: from step 0
  const RunResult second = mfsdp(with_dir);  // the step-4 checkpoint the first one saved
  for (const auto& entry : torchrun_env) unsetenv(entry.first.c_str());

  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_NE(fresh.err.find("mfsdp: warning: torchrun restart 2 of at most 3 without "
                           "--checkpoint-dir: training starts again from step 0"),
            std::string::npos)
      << fresh.err;
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.out.rfind("mfsdp run: torchrun restart 2 of at most 3: resuming from the "
                            "newest complete checkpoint in " +
                                checkpoints + " (from step 0 if it holds none yet)\n",
                            0),
            0u)
      << first.out;
  EXPECT_NE(first.out.find("done: 4 steps"), std::string::npos) << first.out;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.out.find("resumed from " + checkpoints + "/step-00000004 (step 4)"),
            std::string::npos)
      << second.out;
}

TEST(Mpirun, TwoProcessesTrainWhatTheOwnLauncherTrains) {
  const std::string mpirun = env_value("MFSDP_MPIRUN");
  if (mpirun.empty()) {
    GTEST_SKIP() << "MFSDP_MPIRUN is not set: give it Open MPI's mpirun (Debian's openmpi-bin; "
                    "scripts/check-launchers does)";
  }
  setenv("MFSDP_RDZV_SECRET", kSecret, 1);
  const std::string plan = two_rank_plan("mpirun");
  const OwnLaunch reference = own_launcher(plan, "mpirun");
  const std::string out = temp_path("mpirun");
  // mpirun says nothing of where rank 0 listens: --master-addr and --master-port do.
  std::vector<std::string> args = {
      "-np",       "2", "--oversubscribe", "--allow-run-as-root", "-x", "MFSDP_RDZV_SECRET",
      MFSDP_BINARY};
  const std::vector<std::string> flags = torchrun_test_flags(plan, out);
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(),
              {"--master-addr", "127.0.0.1", "--master-port", std::to_string(free_port())});
  const RunResult r = run_program(mpirun, args, kRepo);
  unsetenv("MFSDP_RDZV_SECRET");
  expect_same_training(r, out, reference);
}

// The store of a torch from before VALIDATE (Debian's 1.13), hosted by that torch itself.
TEST(TorchrunLegacyStore, RanksMeetThroughATorch20OrEarlierStoreAndItKeepsServing) {
  const std::string python = env_value("MFSDP_TORCH_LEGACY_PYTHON");
  if (python.empty()) {
    GTEST_SKIP() << "MFSDP_TORCH_LEGACY_PYTHON is not set: give it a Python with torch <= 2.0, "
                    "such as Debian's /usr/bin/python3 with python3-torch (scripts/check-launchers "
                    "does)";
  }
  setenv("MFSDP_RDZV_SECRET", kSecret, 1);
  const std::string plan = two_rank_plan("torchrun_legacy");
  const OwnLaunch reference = own_launcher(plan, "torchrun_legacy");
  const std::string out = temp_path("torchrun_legacy");
  std::vector<std::string> args = {kRepo + "/tests/run/legacy_torchrun_agent.py", MFSDP_BINARY};
  const std::vector<std::string> flags = torchrun_test_flags(plan, out);
  args.insert(args.end(), flags.begin(), flags.end());
  const RunResult r = run_program(python, args, kRepo);
  unsetenv("MFSDP_RDZV_SECRET");
  expect_same_training(r, out, reference);
  EXPECT_NE(r.out.find("ranks exited [0, 0], store after them: served"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace mfsdp::testing
