#include "executor/launch/process.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "schema/error.h"
#include "tests/executor/launch/launcher_process.h"

namespace mfsdp::launch {
namespace {

// Reads the child's stdout until it ends.
std::string read_stdout(ChildProcess& child) {
  std::string text;
  while (child.fd(Output::kStdout) >= 0) {
    pollfd fd{child.fd(Output::kStdout), POLLIN, 0};
    poll(&fd, 1, -1);
    child.read(Output::kStdout, text);
  }
  return text;
}

TEST(ChildProcess, GetsExactlyTheEnvironmentItIsGiven) {
  ChildProcess child({MFSDP_LAUNCH_FAKE_WORKER, "env=MFSDP_A", "env=PATH"}, {"MFSDP_A=1"});
  EXPECT_EQ(read_stdout(child), "MFSDP_A=1\nPATH unset\n");
  EXPECT_TRUE(child.wait().ok());
}

TEST(ChildProcess, ReportsExitCodeAndSignal) {
  ChildProcess exits({MFSDP_LAUNCH_FAKE_WORKER, "exit=7"}, {});
  const ExitStatus code = exits.wait();
  EXPECT_EQ(code.code, 7);
  EXPECT_EQ(code.describe(), "exited with code 7");
  EXPECT_EQ(code.shell_status(), 7);

  ChildProcess blocks({MFSDP_LAUNCH_FAKE_WORKER, "block"}, {});
  EXPECT_EQ(blocks.try_wait(), std::nullopt);
  blocks.signal_group(SIGTERM);
  const ExitStatus killed = blocks.wait();
  EXPECT_EQ(killed.signal, SIGTERM);
  EXPECT_EQ(killed.describe(), "was killed by SIGTERM");
  EXPECT_EQ(killed.shell_status(), 143);
  EXPECT_FALSE(killed.ok());
}

TEST(ChildProcess, ProgramThatCannotRunIsARuntimeError) {
  try {
    ChildProcess child({"/nonexistent/program"}, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_EQ(std::string(e.what()), "cannot run /nonexistent/program: No such file or directory");
  }
}

TEST(ChildProcess, StartsInTheWorkingDirectoryItIsGiven) {
  const std::filesystem::path dir = ::testing::TempDir() + "/mfsdp_process_cwd";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ChildProcess child({MFSDP_LAUNCH_FAKE_WORKER, "create=made_here"}, {}, dir.string());
  EXPECT_TRUE(child.wait().ok());
  EXPECT_TRUE(std::filesystem::exists(dir / "made_here"));
}

TEST(ChildProcess, MissingWorkingDirectoryIsARuntimeErrorNamingIt) {
  try {
    ChildProcess child({MFSDP_LAUNCH_FAKE_WORKER}, {}, "/nonexistent/dir");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_EQ(std::string(e.what()), std::string("cannot run ") + MFSDP_LAUNCH_FAKE_WORKER +
                                         " in /nonexistent/dir: No such file or directory");
  }
}

TEST(ChildProcess, DestroyingARunningChildKillsAndReapsIt) {
  pid_t pid;
  {
    ChildProcess child({MFSDP_LAUNCH_FAKE_WORKER, "block"}, {});
    pid = child.pid();
  }
  EXPECT_TRUE(testing::process_gone(pid));
}

TEST(ChildProcess, EnvironmentWithReplacesAndAddsVariables) {
  setenv("MFSDP_LAUNCH_REPLACED", "old", 1);
  const std::vector<std::string> env = environment_with({{"MFSDP_LAUNCH_REPLACED", "first"},
                                                         {"MFSDP_LAUNCH_ADDED", "x"},
                                                         {"MFSDP_LAUNCH_REPLACED", "new"}});
  auto count = [&env](const std::string& entry) {
    return std::count(env.begin(), env.end(), entry);
  };
  EXPECT_EQ(count("MFSDP_LAUNCH_REPLACED=new"), 1);
  EXPECT_EQ(count("MFSDP_LAUNCH_REPLACED=old"), 0);
  EXPECT_EQ(count("MFSDP_LAUNCH_REPLACED=first"), 0);
  EXPECT_EQ(count("MFSDP_LAUNCH_ADDED=x"), 1);
  EXPECT_EQ(count(std::string("PATH=") + std::getenv("PATH")), 1);
}

// What the fake worker's burst=N (or eburst=N) prints on rank `rank`.
std::string burst_text(int rank, int count) {
  std::string text;
  for (int i = 1; i <= count; ++i) {
    text += "rank " + std::to_string(rank) + " line " + std::to_string(i) + " " +
            std::string(300, static_cast<char>('a' + rank)) + "\n";
  }
  return text;
}

TEST(FinishAll, ReadsBothPipesOfEveryChildToTheEnd) {
  // About 1 MB on stderr first, then on stdout: far more than a pipe holds, so a reader that
  // waited on one pipe alone would never see the child finish.
  std::vector<ChildProcess> children;
  for (int rank = 0; rank < 2; ++rank) {
    children.emplace_back(
        std::vector<std::string>{MFSDP_LAUNCH_FAKE_WORKER, "eburst=3000", "burst=3000", "exit=4"},
        std::vector<std::string>{"RANK=" + std::to_string(rank)});
  }
  const std::vector<Finished> finished = finish_all(children);
  ASSERT_EQ(finished.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(finished[rank].out, burst_text(rank, 3000));
    EXPECT_EQ(finished[rank].err, burst_text(rank, 3000));
    EXPECT_EQ(finished[rank].status.code, 4);
    EXPECT_FALSE(finished[rank].timed_out);
  }
}

TEST(FinishAll, KillsChildrenStillRunningAtTheLimit) {
  std::vector<ChildProcess> children;
  children.emplace_back(std::vector<std::string>{MFSDP_LAUNCH_FAKE_WORKER, "out=1", "block"},
                        std::vector<std::string>{});
  children.emplace_back(std::vector<std::string>{MFSDP_LAUNCH_FAKE_WORKER, "err=1", "exit=3"},
                        std::vector<std::string>{});
  const std::vector<Finished> finished = finish_all(children, std::chrono::milliseconds(300));
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_TRUE(finished[0].timed_out);
  EXPECT_EQ(finished[0].status.signal, SIGKILL);
  EXPECT_EQ(finished[0].out, "out 1 of rank ?\n");
  EXPECT_FALSE(finished[1].timed_out);
  EXPECT_EQ(finished[1].status.code, 3);
  EXPECT_EQ(finished[1].err, "err 1 of rank ?\n");
}

TEST(ChildProcess, SignalNamesAreTheUsualOnes) {
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGRTMIN + 1), "signal " + std::to_string(SIGRTMIN + 1));
}

}  // namespace
}  // namespace mfsdp::launch
