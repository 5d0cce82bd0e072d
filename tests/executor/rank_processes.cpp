#include "tests/executor/rank_processes.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

extern char** environ;

namespace mfsdp::testing {
namespace {

using Clock = std::chrono::steady_clock;

// The environment of one rank: ours, minus the launch variables, plus that rank's.
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
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const auto& [name, value] : set) replaced |= entry.rfind(name + "=", 0) == 0;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (std::string& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // read ends
  int err = -1;
};

}  // namespace

std::vector<RankResult> run_ranks(const RankLaunch& launch) {
  std::vector<Child> children(launch.world_size);
  for (int rank = 0; rank < launch.world_size; ++rank) {
    // Everything the child needs is built before fork: after it only exec-safe calls.
    std::vector<std::string> argv_strings = {launch.program};
    argv_strings.insert(argv_strings.end(), launch.args.begin(), launch.args.end());
    std::vector<std::string> env_strings = rank_environment(launch, rank);
    std::vector<char*> argv = pointers(argv_strings);
    std::vector<char*> envp = pointers(env_strings);
    int out_pipe[2], err_pipe[2];
    // Close-on-exec, so no rank inherits the pipes of another and holds them open.
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
      throw std::runtime_error("pipe2 failed");
    }
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      dup2(out_pipe[1], STDOUT_FILENO);
      dup2(err_pipe[1], STDERR_FILENO);
      execve(launch.program.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    children[rank] = Child{pid, out_pipe[0], err_pipe[0]};
  }

  std::vector<RankResult> results(launch.world_size);
  std::vector<pollfd> fds;
  std::vector<std::string*> sinks;
  for (int rank = 0; rank < launch.world_size; ++rank) {
    fds.push_back({children[rank].out, POLLIN, 0});
    sinks.push_back(&results[rank].out);
    fds.push_back({children[rank].err, POLLIN, 0});
    sinks.push_back(&results[rank].err);
  }
  const auto deadline = Clock::now() + launch.limit;
  size_t open_fds = fds.size();
  bool killed = false;
  while (open_fds > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 && !killed) {
      for (const Child& child : children) kill(child.pid, SIGKILL);
      killed = true;
    }
    const int ready = poll(fds.data(), fds.size(), killed ? -1 : static_cast<int>(left));
    if (ready < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buffer[4096];
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (int rank = 0; rank < launch.world_size; ++rank) {
    int status = 0;
    waitpid(children[rank].pid, &status, 0);
    if (WIFEXITED(status)) {
      results[rank].exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      results[rank].signal = WTERMSIG(status);
      if (killed) results[rank].err += "\n[killed: still running after the test's time limit]";
    }
  }
  return results;
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    throw std::runtime_error("cannot bind a free port");
  }
  close(fd);
  return ntohs(address.sin_port);
}

}  // namespace mfsdp::testing
