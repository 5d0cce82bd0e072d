// What `mfsdp run` prints where other launchers collect it: a worker of torchrun, mpirun or
// srun writes plain progress lines even when its stdout is a terminal (Open MPI gives its
// workers a pty and pipes what they write into one log), unless --progress bar asks for the
// redrawn status line.
#include <pty.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/cli/cli_test_support.h"

namespace mfsdp::testing {
namespace {

struct TerminalRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr, as the terminal received them
};

// Runs mfsdp with `args` as rank 0 of a one-rank job of an outside launcher (torchrun's
// variables), its stdout and stderr on a pseudo-terminal whose output processing is off, so
// that what is read is byte for byte what mfsdp wrote.
TerminalRun run_on_terminal_as_external_rank(const std::vector<std::string>& args) {
  const std::string port = std::to_string(free_port());
  int terminal = -1;
  const pid_t pid = ::forkpty(&terminal, nullptr, nullptr, nullptr);
  if (pid == 0) {
    termios mode{};
    ::tcgetattr(STDOUT_FILENO, &mode);
    mode.c_oflag &= ~static_cast<tcflag_t>(OPOST);
    ::tcsetattr(STDOUT_FILENO, TCSANOW, &mode);
    ::setenv("RANK", "0", 1);
    ::setenv("WORLD_SIZE", "1", 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", port.c_str(), 1);
    ::unsetenv("MFSDP_LIVE_PROGRESS");
    if (::chdir(kRepo.c_str()) != 0) ::_exit(126);
    std::vector<char*> argv{const_cast<char*>(MFSDP_BINARY)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(MFSDP_BINARY, argv.data());
    ::_exit(127);
  }
  TerminalRun result;
  if (pid < 0) return result;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(terminal, buffer, sizeof buffer);
    if (n <= 0) break;  // EIO once the child has closed the terminal's last descriptor
    result.output.append(buffer, static_cast<size_t>(n));
  }
  ::close(terminal);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::vector<std::string> one_rank_run(const std::string& plan) {
  return {"run",         plan, "--data",         "examples/tiny_corpus.txt",
          "--seq-len",   "16", "--global-batch", "4",
          "--steps",     "6",  "--log-every",    "5",
          "--optimizer", "sgd"};
}

TEST(RunOutput, AnOutsideLaunchersWorkerPrintsPlainLinesOnATerminal) {
  const std::string plan = temp_path("run_output.plan.json");
  const RunResult planned = mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "1",
                                   "--unit", "layers.*", "--unit", "<root>", "-o", plan, "-q"});
  ASSERT_EQ(planned.exit_code, 0) << planned.err;

  const TerminalRun plain = run_on_terminal_as_external_rank(one_rank_run(plan));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("step 1/6  loss "), std::string::npos) << plain.output;
  EXPECT_NE(plain.output.find("step 5/6  loss "), std::string::npos) << plain.output;
  EXPECT_NE(plain.output.find("step 6/6  loss "), std::string::npos) << plain.output;
  // Steps 2 to 4 are not logged, and nothing redraws them.
  EXPECT_EQ(plain.output.find("step 3/6"), std::string::npos) << plain.output;
  EXPECT_EQ(plain.output.find('\r'), std::string::npos) << plain.output;
  EXPECT_EQ(plain.output.find('\033'), std::string::npos) << plain.output;

  std::vector<std::string> bar = one_rank_run(plan);
  bar.insert(bar.end(), {"--progress", "bar"});
  const TerminalRun redrawn = run_on_terminal_as_external_rank(bar);
  ASSERT_EQ(redrawn.exit_code, 0) << redrawn.output;
  EXPECT_NE(redrawn.output.find("\r\033[Kstep 3/6  loss "), std::string::npos) << redrawn.output;
}

}  // namespace
}  // namespace mfsdp::testing
