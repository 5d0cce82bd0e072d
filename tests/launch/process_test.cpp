#include "executor/launch/process.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>

#include "schema/error.h"
#include "tests/launch/launcher_process.h"

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

TEST(ChildProcess, SignalNamesAreTheUsualOnes) {
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGRTMIN + 1), "signal " + std::to_string(SIGRTMIN + 1));
}

}  // namespace
}  // namespace mfsdp::launch
