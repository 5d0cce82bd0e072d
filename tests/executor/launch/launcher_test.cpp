// The launcher as users meet it: the test driver runs launch() in a subprocess, with fake
// workers that print, fail, hang or wait for the test's signal.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>

#include "executor/launch/launcher.h"
#include "schema/error.h"
#include "tests/executor/launch/launcher_process.h"

namespace mfsdp::testing {
namespace {

using namespace std::chrono_literals;
using launch::LaunchOptions;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A fresh empty directory under the test's temporary directory.
std::filesystem::path scratch_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ("mfsdp_launch_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Waits for every rank's "pid=" line, so the test knows each worker is running and who it is.
std::map<int, pid_t> wait_for_workers(LauncherProcess& launcher, int count) {
  EXPECT_TRUE(launcher.wait_for_stdout("] pid=", count)) << launcher.out() << launcher.err();
  return launcher.worker_pids();
}

void expect_all_gone(const std::map<int, pid_t>& pids) {
  for (const auto& [rank, pid] : pids) {
    EXPECT_TRUE(process_gone(pid)) << "rank " << rank << " (pid " << pid << ") is still there";
  }
}

TEST(Launcher, ReturnsZeroWhenEveryRankExitsWithZero) {
  LauncherProcess launcher({"--nproc", "3", "--master-port", "0"}, {"out=2", "err=1"});
  const launch::ExitStatus status = launcher.finish();
  EXPECT_TRUE(status.ok()) << status.describe() << "\n" << launcher.err();
  for (int rank = 0; rank < 3; ++rank) {
    const std::string r = std::to_string(rank);
    EXPECT_TRUE(contains(launcher.out(), "[rank " + r + "] out 1 of rank " + r + "\n"));
    EXPECT_TRUE(contains(launcher.out(), "[rank " + r + "] out 2 of rank " + r + "\n"));
    EXPECT_TRUE(contains(launcher.err(), "[rank " + r + "] err 1 of rank " + r + "\n"));
  }
  EXPECT_EQ(lines_of(launcher.out()).size(), 6u) << launcher.out();
  EXPECT_EQ(lines_of(launcher.err()).size(), 3u) << launcher.err();
}

TEST(Launcher, GivesEachRankTorchrunsVariablesOnTheSecondNode) {
  LauncherProcess launcher({"--nproc", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                            "10.0.0.7", "--master-port", "29999", "--env", "MFSDP_LAUNCH_TEST=yes"},
                           {"env=RANK", "env=WORLD_SIZE", "env=LOCAL_RANK", "env=LOCAL_WORLD_SIZE",
                            "env=MASTER_ADDR", "env=MASTER_PORT", "env=MFSDP_LAUNCH_TEST"},
                           // Left over from an outer launch: must not reach the workers.
                           {{"RANK", "99"}, {"LOCAL_RANK", "42"}});
  ASSERT_TRUE(launcher.finish().ok()) << launcher.err();
  for (int local_rank = 0; local_rank < 2; ++local_rank) {
    const std::string prefix = "[rank " + std::to_string(2 + local_rank) + "] ";
    for (const std::string& line :
         {"RANK=" + std::to_string(2 + local_rank), std::string("WORLD_SIZE=4"),
          "LOCAL_RANK=" + std::to_string(local_rank), std::string("LOCAL_WORLD_SIZE=2"),
          std::string("MASTER_ADDR=10.0.0.7"), std::string("MASTER_PORT=29999"),
          std::string("MFSDP_LAUNCH_TEST=yes")}) {
      EXPECT_TRUE(contains(launcher.out(), prefix + line + "\n")) << prefix + line;
    }
  }
}

TEST(Launcher, MasterPortZeroGivesEveryRankTheSameFreePort) {
  LauncherProcess launcher({"--nproc", "2", "--master-port", "0"}, {"env=MASTER_PORT"});
  ASSERT_TRUE(launcher.finish().ok()) << launcher.err();
  std::smatch match;
  const std::string out = launcher.out();
  ASSERT_TRUE(std::regex_search(out, match, std::regex(R"(\[rank 0\] MASTER_PORT=(\d+))")));
  const int port = std::stoi(match[1]);
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
  EXPECT_TRUE(contains(out, "[rank 1] MASTER_PORT=" + std::to_string(port) + "\n")) << out;
}

TEST(Launcher, FailedRankStopsTheOthersAndIsReportedWithItsLastLines) {
  LauncherProcess launcher({"--nproc", "3", "--master-port", "0"},
                           {"pid", "@1:wait-usr1", "@1:out=15", "@1:exit=3", "block"});
  const std::map<int, pid_t> pids = wait_for_workers(launcher, 3);
  ASSERT_EQ(pids.size(), 3u);
  kill(pids.at(1), SIGUSR1);
  const launch::ExitStatus status = launcher.finish();
  EXPECT_EQ(status.code, 3) << status.describe() << "\n" << launcher.err();
  const std::string& err = launcher.err();
  EXPECT_TRUE(contains(err,
                       "mfsdp run: rank 1 exited with code 3; stopping ranks 0, 2 "
                       "(SIGTERM, then SIGKILL after 10 s)\n"))
      << err;
  EXPECT_TRUE(contains(err, "mfsdp run: rank 1 failed first: it exited with code 3 (pid " +
                                std::to_string(pids.at(1)) + "); its last 10 lines of output:\n"))
      << err;
  for (int line = 6; line <= 15; ++line) {
    EXPECT_TRUE(contains(err, "[rank 1] out " + std::to_string(line) + " of rank 1\n")) << line;
  }
  EXPECT_FALSE(contains(err, "[rank 1] out 5 of rank 1\n")) << err;
  EXPECT_TRUE(contains(launcher.out(), "[rank 1] out 15 of rank 1\n"));
  expect_all_gone(pids);
}

// Every rank meets the same bad input at once: the user reads its error line once.
TEST(Launcher, ErrorEveryRankPrintsIsShownOnce) {
  LauncherProcess launcher({"--nproc", "3", "--master-port", "0"},
                           {"error=the batch is wrong", "exit=2"});
  const launch::ExitStatus status = launcher.finish();
  EXPECT_EQ(status.code, 2) << status.describe() << "\n" << launcher.err();
  const std::string& err = launcher.err();
  size_t count = 0;
  for (size_t at = 0; (at = err.find("mfsdp: error: the batch is wrong", at)) != std::string::npos;
       ++at) {
    ++count;
  }
  EXPECT_EQ(count, 1u) << err;
  EXPECT_TRUE(contains(err, " with the error above")) << err;
  EXPECT_FALSE(contains(err, "lines of output")) << err;
}

// Rank 0 fails first with exit 6 (as a rank does when a peer goes away under a collective);
// rank 1, which ignores SIGTERM, then exits with its own error: rank 1 is the cause.
TEST(Launcher, BlamesTheRankWithItsOwnErrorOverOneThatLostAPeer) {
  LauncherProcess launcher({"--nproc", "2", "--master-port", "0"},
                           {"ignore-term", "pid", "wait-usr1", "@0:exit=6",
                            "@1:error=target 300 is outside the logits", "@1:exit=2"});
  const std::map<int, pid_t> pids = wait_for_workers(launcher, 2);
  ASSERT_EQ(pids.size(), 2u);
  kill(pids.at(0), SIGUSR1);
  ASSERT_TRUE(launcher.wait_for_stderr("rank 0 exited with code 6; stopping rank 1", 1))
      << launcher.err();
  kill(pids.at(1), SIGUSR1);
  const launch::ExitStatus status = launcher.finish();
  EXPECT_EQ(status.code, 2) << status.describe() << "\n" << launcher.err();
  EXPECT_TRUE(contains(launcher.err(),
                       "mfsdp run: rank 0 failed first (it exited with code 6, losing a peer), "
                       "but the cause is rank 1: it exited with code 2 (pid " +
                           std::to_string(pids.at(1)) + ") with the error above\n"))
      << launcher.err();
}

TEST(Launcher, RankKilledBySignalIsReportedWithTheSignalName) {
  LauncherProcess launcher({"--nproc", "2", "--master-port", "0"},
                           {"pid", "@0:wait-usr1", "@0:kill=9", "block"});
  const std::map<int, pid_t> pids = wait_for_workers(launcher, 2);
  ASSERT_EQ(pids.size(), 2u);
  kill(pids.at(0), SIGUSR1);
  const launch::ExitStatus status = launcher.finish();
  EXPECT_EQ(status.code, 128 + SIGKILL) << status.describe();
  EXPECT_TRUE(contains(launcher.err(), "mfsdp run: rank 0 failed first: it was killed by SIGKILL"))
      << launcher.err();
  expect_all_gone(pids);
}

TEST(Launcher, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  LauncherProcess launcher({"--nproc", "3", "--master-port", "0", "--grace-ms", "300"},
                           {"ignore-term", "pid", "@0:wait-usr1", "@0:exit=1", "block"});
  const std::map<int, pid_t> pids = wait_for_workers(launcher, 3);
  ASSERT_EQ(pids.size(), 3u);
  const auto failed_at = std::chrono::steady_clock::now();
  kill(pids.at(0), SIGUSR1);
  const launch::ExitStatus status = launcher.finish();
  EXPECT_GE(std::chrono::steady_clock::now() - failed_at, 300ms);
  EXPECT_EQ(status.code, 1) << status.describe();
  EXPECT_TRUE(contains(launcher.err(),
                       "mfsdp run: ranks 1, 2 are still running 300 ms after SIGTERM; killing "
                       "them (SIGKILL)\n"))
      << launcher.err();
  expect_all_gone(pids);
}

TEST(Launcher, SigintStopsEveryWorkerAndReturns130) {
  LauncherProcess launcher({"--nproc", "2", "--master-port", "0"}, {"trap-term", "pid", "block"});
  const std::map<int, pid_t> pids = wait_for_workers(launcher, 2);
  ASSERT_EQ(pids.size(), 2u);
  launcher.send(SIGINT);
  const launch::ExitStatus status = launcher.finish();
  EXPECT_EQ(status.code, 130) << status.describe() << "\n" << launcher.err();
  EXPECT_TRUE(contains(launcher.err(), "mfsdp run: interrupted by SIGINT; stopping ranks 0, 1"))
      << launcher.err();
  // The workers got SIGTERM, not SIGKILL: each ran its handler.
  EXPECT_TRUE(contains(launcher.out(), "[rank 0] terminated by SIGTERM\n")) << launcher.out();
  EXPECT_TRUE(contains(launcher.out(), "[rank 1] terminated by SIGTERM\n")) << launcher.out();
  EXPECT_FALSE(contains(launcher.err(), "failed first")) << launcher.err();
  expect_all_gone(pids);
}

TEST(Launcher, SigtermStopsEveryWorkerAndReturns143) {
  LauncherProcess launcher({"--nproc", "2", "--master-port", "0"}, {"pid", "block"});
  const std::map<int, pid_t> pids = wait_for_workers(launcher, 2);
  ASSERT_EQ(pids.size(), 2u);
  launcher.send(SIGTERM);
  const launch::ExitStatus status = launcher.finish();
  EXPECT_EQ(status.code, 143) << status.describe() << "\n" << launcher.err();
  expect_all_gone(pids);
}

TEST(Launcher, SecondInterruptKillsWithoutWaitingForTheGracePeriod) {
  LauncherProcess launcher({"--nproc", "2", "--master-port", "0", "--grace-ms", "600000"},
                           {"ignore-term", "pid", "block"});
  const std::map<int, pid_t> pids = wait_for_workers(launcher, 2);
  ASSERT_EQ(pids.size(), 2u);
  launcher.send(SIGINT);
  ASSERT_TRUE(launcher.wait_for_stderr("interrupted by SIGINT", 1)) << launcher.err();
  launcher.send(SIGINT);
  // Far below the 10-minute grace: finish() kills the driver (and fails below) after 30 s.
  const launch::ExitStatus status = launcher.finish();
  EXPECT_EQ(status.code, 130) << status.describe() << "\n" << launcher.err();
  EXPECT_TRUE(contains(launcher.err(), "mfsdp run: interrupted again; killing ranks 0, 1 now"))
      << launcher.err();
  expect_all_gone(pids);
}

TEST(Launcher, WorkersDieWithTheLauncher) {
  LauncherProcess launcher({"--nproc", "2", "--master-port", "0"}, {"pid", "block"});
  const std::map<int, pid_t> pids = wait_for_workers(launcher, 2);
  ASSERT_EQ(pids.size(), 2u);
  // pidfds: they become readable when the worker exits, whoever reaps it.
  std::vector<pollfd> fds;
  for (const auto& [rank, pid] : pids) {
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) GTEST_SKIP() << "pidfd_open is not available: " << std::strerror(errno);
    fds.push_back({fd, POLLIN, 0});
  }
  launcher.send(SIGKILL);
  launcher.finish();
  for (pollfd& fd : fds) {
    EXPECT_EQ(poll(&fd, 1, 10000), 1) << "a worker outlived its launcher by 10 s";
    close(fd.fd);
  }
}

TEST(Launcher, LinesOfConcurrentRanksAreNeverMixed) {
  constexpr int kRanks = 4, kLines = 400;
  LauncherProcess launcher({"--nproc", std::to_string(kRanks), "--master-port", "0"},
                           {"burst=" + std::to_string(kLines), "eburst=" + std::to_string(kLines)});
  ASSERT_TRUE(launcher.finish().ok()) << launcher.err();
  for (const std::string* text : {&launcher.out(), &launcher.err()}) {
    std::vector<int> next(kRanks, 1);
    const std::regex form(R"(\[rank (\d)\] rank (\d) line (\d+) ([a-z]+))");
    for (const std::string& line : lines_of(*text)) {
      std::smatch match;
      ASSERT_TRUE(std::regex_match(line, match, form)) << "damaged line: " << line;
      const int rank = std::stoi(match[1]);
      ASSERT_EQ(match[2], match[1]) << line;
      ASSERT_EQ(std::stoi(match[3]), next[rank]++) << line;
      ASSERT_EQ(match[4], std::string(300, static_cast<char>('a' + rank))) << line;
    }
    for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(next[rank], kLines + 1) << rank;
  }
}

TEST(Launcher, LastLineWithoutNewlineIsPassedOn) {
  LauncherProcess launcher({"--master-port", "0"}, {"out=1", "partial=the end"});
  ASSERT_TRUE(launcher.finish().ok()) << launcher.err();
  EXPECT_EQ(launcher.out(), "[rank 0] out 1 of rank 0\n[rank 0] the end\n");
}

TEST(Launcher, LogDirGetsOneFilePerRankAndNothingIsForwarded) {
  const std::filesystem::path dir = scratch_dir("logs") / "made" / "by-launcher";
  LauncherProcess launcher(
      {"--nproc", "2", "--nnodes", "2", "--node-rank", "1", "--log-dir", dir.string()},
      {"out=3", "err=2"});
  ASSERT_TRUE(launcher.finish().ok()) << launcher.err();
  EXPECT_EQ(launcher.out(), "");
  EXPECT_EQ(launcher.err(), "");
  for (int rank : {2, 3}) {
    const std::string r = std::to_string(rank);
    std::vector<std::string> outs, errs;
    for (const std::string& line : lines_of(read_file(dir / ("rank-" + r + ".log")))) {
      (line.rfind("out", 0) == 0 ? outs : errs).push_back(line);
    }
    EXPECT_EQ(outs, (std::vector<std::string>{"out 1 of rank " + r, "out 2 of rank " + r,
                                              "out 3 of rank " + r}));
    EXPECT_EQ(errs, (std::vector<std::string>{"err 1 of rank " + r, "err 2 of rank " + r}));
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "rank-0.log"));
}

TEST(Launcher, FailureReportWithLogDirNamesTheLogFile) {
  const std::filesystem::path dir = scratch_dir("failure_logs");
  LauncherProcess launcher({"--nproc", "2", "--master-port", "0", "--log-dir", dir.string()},
                           {"@1:out=3", "@1:exit=2", "block"});
  const launch::ExitStatus status = launcher.finish();
  EXPECT_EQ(status.code, 2) << launcher.err();
  EXPECT_EQ(launcher.out(), "");
  EXPECT_TRUE(contains(launcher.err(), "mfsdp run: rank 1 failed first: it exited with code 2"))
      << launcher.err();
  EXPECT_TRUE(contains(launcher.err(), "its last 3 lines of output (all of it: " +
                                           (dir / "rank-1.log").string() + "):\n"))
      << launcher.err();
  EXPECT_TRUE(contains(launcher.err(), "[rank 1] out 3 of rank 1\n")) << launcher.err();
  EXPECT_EQ(read_file(dir / "rank-1.log"), "out 1 of rank 1\nout 2 of rank 1\nout 3 of rank 1\n");
}

// In-process from here: these fail before anything is started.

LaunchOptions worker_options(const std::vector<std::string>& actions) {
  LaunchOptions options;
  options.argv = {MFSDP_LAUNCH_FAKE_WORKER};
  options.argv.insert(options.argv.end(), actions.begin(), actions.end());
  return options;
}

// A listening socket on 127.0.0.1 and some free port.
class Listener {
 public:
  Listener() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&address), length) != 0 || listen(fd_, 1) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1: " << std::strerror(errno);
    }
    port_ = ntohs(address.sin_port);
  }
  ~Listener() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

bool has_children() {
  return !(waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD);
}

TEST(Launcher, PortInUseIsAUsageErrorAndStartsNothing) {
  const Listener listener;
  const std::filesystem::path marker = scratch_dir("port") / "started";
  LaunchOptions options = worker_options({"create=" + marker.string()});
  options.nproc_per_node = 2;
  options.master_port = listener.port();
  try {
    launch::launch(options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_EQ(std::string(e.what()), "port " + std::to_string(listener.port()) +
                                         " is in use; pick another with --master-port or use "
                                         "--master-port 0");
  }
  EXPECT_FALSE(has_children());
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(Launcher, PortInUseElsewhereIsNotCheckedOnOtherNodes) {
  const Listener listener;
  LaunchOptions options = worker_options({});
  options.nnodes = 2;
  options.node_rank = 1;
  options.master_port = listener.port();
  EXPECT_EQ(launch::launch(options), 0);
}

TEST(Launcher, InvalidOptionsAreUsageErrorsNamingTheFlag) {
  struct Case {
    std::function<void(LaunchOptions&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](LaunchOptions& o) { o.nproc_per_node = 0; },
       "--nproc-per-node 0 is not allowed; start at least 1 process per node"},
      {[](LaunchOptions& o) { o.nnodes = 0; }, "--nnodes 0 is not allowed; give at least 1"},
      {[](LaunchOptions& o) { o.node_rank = -1; },
       "--node-rank -1 is out of range for --nnodes 1; use 0..0"},
      {[](LaunchOptions& o) { o.nnodes = 2, o.node_rank = 2; },
       "--node-rank 2 is out of range for --nnodes 2; use 0..1"},
      {[](LaunchOptions& o) { o.master_port = 65536; },
       "--master-port 65536 is out of range; use 1..65535, or 0 to pick a free port"},
      {[](LaunchOptions& o) { o.master_port = -1; },
       "--master-port -1 is out of range; use 1..65535, or 0 to pick a free port"},
      {[](LaunchOptions& o) { o.nnodes = 2, o.master_port = 0; },
       "--master-port 0 (pick a free port) works only with --nnodes 1, since the other nodes "
       "could not know the port; give every node the same --master-port"},
      {[](LaunchOptions& o) { o.master_addr = ""; },
       "--master-addr is empty; give the host name or address of node 0"},
      {[](LaunchOptions& o) { o.nproc_per_node = 1 << 16, o.nnodes = 1 << 15; },
       "--nproc-per-node 65536 times --nnodes 32768 is more ranks than supported (1073741824); "
       "give fewer"},
      {[](LaunchOptions& o) { o.grace = std::chrono::milliseconds(-1); },
       "--grace -1 ms is negative; give 0 or more"},
      {[](LaunchOptions& o) {
         o.extra_env = {{"RANK", "3"}};
       },
       "RANK is set by the launcher for each rank; do not set it yourself (use the launch flags "
       "instead)"},
  };
  for (const Case& c : cases) {
    LaunchOptions options = worker_options({"create=/nonexistent/should-not-run"});
    c.change(options);
    try {
      launch::launch(options);
      ADD_FAILURE() << "expected an error: " << c.message;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage) << c.message;
      EXPECT_EQ(std::string(e.what()), c.message);
    }
  }
  EXPECT_FALSE(has_children());
}

TEST(Launcher, WorkerProgramThatCannotRunIsARuntimeError) {
  LaunchOptions options;
  options.argv = {"/nonexistent/mfsdp-worker"};
  options.nproc_per_node = 2;
  options.master_port = 0;
  try {
    launch::launch(options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_EQ(std::string(e.what()),
              "cannot run /nonexistent/mfsdp-worker: No such file or directory");
  }
  EXPECT_FALSE(has_children());
}

TEST(Launcher, LogFileThatIsASymlinkIsRefusedAndItsTargetLeftAlone) {
  const std::filesystem::path dir = scratch_dir("symlinked_log");
  const std::filesystem::path target = dir / "precious";
  std::ofstream(target) << "keep me";
  std::filesystem::create_directories(dir / "logs");
  std::filesystem::create_symlink(target, dir / "logs" / "rank-0.log");
  LaunchOptions options = worker_options({});
  options.master_port = 0;
  options.log_dir = (dir / "logs").string();
  try {
    launch::launch(options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kIo);
    EXPECT_TRUE(contains(e.what(),
                         "rank-0.log is a symbolic link, and logs are not written "
                         "through links"))
        << e.what();
  }
  std::ifstream in(target);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "keep me");
  EXPECT_FALSE(has_children());
}

TEST(Launcher, LogDirThatIsASymlinkIsRefusedAndLogsArePrivate) {
  const std::filesystem::path dir = scratch_dir("symlinked_log_dir");
  std::filesystem::create_directories(dir / "real");
  std::filesystem::create_directory_symlink(dir / "real", dir / "link");
  LaunchOptions options = worker_options({"out=1"});
  options.master_port = 0;
  options.log_dir = (dir / "link").string();
  try {
    launch::launch(options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kIo);
    EXPECT_EQ(std::string(e.what()),
              "--log-dir " + options.log_dir +
                  " is a symbolic link, and logs are not written through links; give the "
                  "directory it points to");
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "real" / "rank-0.log"));
  EXPECT_FALSE(has_children());

  options.log_dir = (dir / "real").string();
  EXPECT_EQ(launch::launch(options), 0);
  const auto permissions = std::filesystem::status(dir / "real" / "rank-0.log").permissions();
  EXPECT_EQ(permissions & (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
            std::filesystem::perms::none);
}

TEST(Launcher, UnwritableLogDirIsAnIoError) {
  const std::filesystem::path file = scratch_dir("unwritable") / "a-file";
  std::ofstream(file) << "not a directory";
  LaunchOptions options = worker_options({});
  options.master_port = 0;
  options.log_dir = (file / "logs").string();
  try {
    launch::launch(options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kIo);
    EXPECT_TRUE(contains(e.what(), "--log-dir " + options.log_dir + ": cannot create it"))
        << e.what();
  }
  EXPECT_FALSE(has_children());
}

}  // namespace
}  // namespace mfsdp::testing
