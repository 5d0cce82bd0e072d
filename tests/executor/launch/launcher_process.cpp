#include "tests/executor/launch/launcher_process.h"

#include <poll.h>
#include <signal.h>

#include <cerrno>
#include <regex>
#include <sstream>

namespace mfsdp::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> driver_argv(const std::vector<std::string>& driver_args,
                                     const std::vector<std::string>& worker_args) {
  std::vector<std::string> argv = {MFSDP_LAUNCH_DRIVER};
  argv.insert(argv.end(), driver_args.begin(), driver_args.end());
  argv.push_back("--");
  argv.push_back(MFSDP_LAUNCH_FAKE_WORKER);
  argv.insert(argv.end(), worker_args.begin(), worker_args.end());
  return argv;
}

int count_lines_with(const std::string& text, const std::string& needle) {
  int count = 0;
  for (const std::string& line : lines_of(text)) count += line.find(needle) != std::string::npos;
  return count;
}

}  // namespace

LauncherProcess::LauncherProcess(const std::vector<std::string>& driver_args,
                                 const std::vector<std::string>& worker_args,
                                 const std::vector<std::pair<std::string, std::string>>& env)
    : process_(driver_argv(driver_args, worker_args), launch::environment_with(env)) {}

void LauncherProcess::send(int signal) {
  kill(process_.pid(), signal);
}

bool LauncherProcess::read_once(int timeout_ms) {
  std::vector<pollfd> fds;
  for (const launch::Output stream : {launch::Output::kStdout, launch::Output::kStderr}) {
    if (process_.fd(stream) >= 0) fds.push_back({process_.fd(stream), POLLIN, 0});
  }
  if (fds.empty()) return false;
  if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return false;
  process_.read(launch::Output::kStdout, out_);
  process_.read(launch::Output::kStderr, err_);
  return true;
}

bool LauncherProcess::wait_for(const std::string& text, const std::string& needle, int count,
                               std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (count_lines_with(text, needle) < count) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || !read_once(static_cast<int>(left.count()))) return false;
  }
  return true;
}

bool LauncherProcess::wait_for_stdout(const std::string& needle, int count,
                                      std::chrono::milliseconds limit) {
  return wait_for(out_, needle, count, limit);
}

bool LauncherProcess::wait_for_stderr(const std::string& needle, int count,
                                      std::chrono::milliseconds limit) {
  return wait_for(err_, needle, count, limit);
}

std::map<int, pid_t> LauncherProcess::worker_pids() const {
  static const std::regex pid_line(R"(\[rank (\d+)\] pid=(\d+))");
  std::map<int, pid_t> pids;
  for (const std::string& line : lines_of(out_)) {
    std::smatch match;
    if (std::regex_match(line, match, pid_line)) {
      pids[std::stoi(match[1])] = static_cast<pid_t>(std::stol(match[2]));
    }
  }
  return pids;
}

launch::ExitStatus LauncherProcess::finish(std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  bool killed = false;
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 && !killed) {
      process_.signal_group(SIGKILL);
      killed = true;
      err_ += "\n[test: the driver was still running after its time limit; killed]\n";
    }
    if (!read_once(killed ? -1 : static_cast<int>(left.count()))) break;
  }
  return process_.wait();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

bool process_gone(pid_t pid) {
  return kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace mfsdp::testing
