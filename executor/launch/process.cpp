#include "executor/launch/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "schema/error.h"

extern char** environ;

namespace mfsdp::launch {
namespace {

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (std::string& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// A descriptor the child can dup2 onto 0, 1 or 2 without clobbering another one it still needs:
// when the parent runs with a standard stream closed, pipe2 may hand out 0, 1 or 2.
int above_stdio(int fd) {
  if (fd > STDERR_FILENO) return fd;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  ::close(fd);
  return moved;
}

struct Pipe {
  int read = -1;
  int write = -1;
  Pipe() {
    int fds[2];
    // Close-on-exec, so no child inherits another child's pipes and holds them open.
    if (pipe2(fds, O_CLOEXEC) != 0) {
      fail(ExitCode::kRuntime, std::string("cannot create a pipe: ") + std::strerror(errno));
    }
    read = above_stdio(fds[0]);
    write = above_stdio(fds[1]);
    if (read < 0 || write < 0) {
      close_fd(read);
      close_fd(write);
      fail(ExitCode::kRuntime, std::string("cannot create a pipe: ") + std::strerror(errno));
    }
  }
  ~Pipe() {
    close_fd(read);
    close_fd(write);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
};

struct ChildSetup {
  const char* path;
  char* const* argv;
  char* const* envp;
  const char* directory;  // nullptr: stay in the parent's
  int stdin_fd, stdout_fd, stderr_fd;
  int report_fd;  // gets a ChildFailure when a step before exec fails
  pid_t parent;
};

// What the child writes to the report pipe when it cannot become the program.
struct ChildFailure {
  bool in_chdir;  // the working directory was the problem, not the program
  int error;
};

[[noreturn]] void report_and_exit(int report_fd, ChildFailure failure) {
  ssize_t ignored = ::write(report_fd, &failure, sizeof failure);
  (void)ignored;
  _exit(127);
}

// Runs in the forked child: only async-signal-safe calls until execve.
[[noreturn]] void become_program(const ChildSetup& setup) {
  auto give_up = [&setup](int error) { report_and_exit(setup.report_fd, {false, error}); };
  if (setpgid(0, 0) != 0) give_up(errno);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) give_up(errno);
  // The parent may have died before prctl took effect; then no signal is coming.
  if (getppid() != setup.parent) _exit(127);
  if (dup2(setup.stdin_fd, STDIN_FILENO) < 0 || dup2(setup.stdout_fd, STDOUT_FILENO) < 0 ||
      dup2(setup.stderr_fd, STDERR_FILENO) < 0) {
    give_up(errno);
  }
  if (setup.directory != nullptr && chdir(setup.directory) != 0) {
    report_and_exit(setup.report_fd, {true, errno});
  }
  // A handler inherited from the parent must not run here (it could write to the parent's
  // self-pipe); exec resets them anyway. Ignored signals stay ignored (nohup), except SIGPIPE.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) != 0) continue;
    if (sig == SIGPIPE || (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN)) {
      sigaction(sig, &default_action, nullptr);
    }
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(setup.path, setup.argv, setup.envp);
  report_and_exit(setup.report_fd, {false, errno});
}

ExitStatus decode(int status) {
  ExitStatus result;
  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  } else {
    result.code = WEXITSTATUS(status);
  }
  return result;
}

}  // namespace

std::string ExitStatus::describe() const {
  if (signal != 0) return "was killed by " + signal_name(signal);
  return "exited with code " + std::to_string(code);
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    case SIGXCPU:
      return "SIGXCPU";
    case SIGXFSZ:
      return "SIGXFSZ";
    case SIGSYS:
      return "SIGSYS";
    default:
      return "signal " + std::to_string(signal);
  }
}

std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  auto overridden = [&overrides](const std::string& entry) {
    for (const auto& [name, value] : overrides) {
      if (entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
          entry[name.size()] == '=') {
        return true;
      }
    }
    return false;
  };
  std::vector<std::string> result;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!overridden(*e)) result.emplace_back(*e);
  }
  for (size_t i = 0; i < overrides.size(); ++i) {
    bool set_again_later = false;
    for (size_t j = i + 1; j < overrides.size(); ++j) {
      set_again_later |= overrides[j].first == overrides[i].first;
    }
    if (!set_again_later) result.push_back(overrides[i].first + "=" + overrides[i].second);
  }
  return result;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::vector<std::string>& environment,
                           const std::string& working_directory) {
  if (argv.empty() || argv[0].empty()) fail(ExitCode::kInternal, "no program to start");
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> argv_strings = argv;
  std::vector<std::string> env_strings = environment;
  const std::vector<char*> argv_pointers = pointers(argv_strings);
  const std::vector<char*> env_pointers = pointers(env_strings);
  Pipe out, err, report;
  int null_fd = above_stdio(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null_fd < 0) {
    fail(ExitCode::kRuntime, std::string("cannot open /dev/null: ") + std::strerror(errno));
  }
  const ChildSetup setup{argv_strings[0].c_str(),
                         argv_pointers.data(),
                         env_pointers.data(),
                         working_directory.empty() ? nullptr : working_directory.c_str(),
                         null_fd,
                         out.write,
                         err.write,
                         report.write,
                         getpid()};

  // Signals stay blocked from fork until the child has dropped the parent's handlers.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  const pid_t pid = fork();
  if (pid == 0) become_program(setup);
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ::close(null_fd);
  if (pid < 0) {
    fail(ExitCode::kRuntime,
         "cannot start " + argv[0] + ": fork failed: " + std::strerror(fork_errno));
  }
  close_fd(out.write);
  close_fd(err.write);
  close_fd(report.write);

  // The report pipe closes on a successful exec, or carries what failed.
  ChildFailure failure{false, 0};
  ssize_t n;
  do {
    n = ::read(report.read, &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const std::string where = failure.in_chdir ? " in " + working_directory : "";
    fail(ExitCode::kRuntime, "cannot run " + argv[0] + where + ": " + std::strerror(failure.error));
  }

  pid_ = pid;
  std::swap(out_fd_, out.read);
  std::swap(err_fd_, err.read);
  fcntl(out_fd_, F_SETFL, fcntl(out_fd_, F_GETFL) | O_NONBLOCK);
  fcntl(err_fd_, F_SETFL, fcntl(err_fd_, F_GETFL) | O_NONBLOCK);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_), out_fd_(other.out_fd_), err_fd_(other.err_fd_), status_(other.status_) {
  other.pid_ = -1;
  other.out_fd_ = -1;
  other.err_fd_ = -1;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !status_) {
    signal_group(SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  close_fd(out_fd_);
  close_fd(err_fd_);
}

ChildProcess::Read ChildProcess::read(Output output, std::string& into) {
  int& fd = output == Output::kStdout ? out_fd_ : err_fd_;
  if (fd < 0) return Read::kEnd;
  char buffer[65536];
  const ssize_t n = ::read(fd, buffer, sizeof buffer);
  if (n > 0) {
    into.append(buffer, static_cast<size_t>(n));
    return Read::kData;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    return Read::kNothingNow;
  }
  close_fd(fd);
  return Read::kEnd;
}

void ChildProcess::signal_group(int signal) {
  if (pid_ <= 0 || status_) return;
  if (kill(-pid_, signal) != 0) kill(pid_, signal);
}

std::optional<ExitStatus> ChildProcess::try_wait() {
  if (status_ || pid_ <= 0) return status_;
  int status = 0;
  pid_t reaped;
  do {
    reaped = waitpid(pid_, &status, WNOHANG);
  } while (reaped < 0 && errno == EINTR);
  if (reaped == pid_) {
    status_ = decode(status);
  } else if (reaped < 0) {
    fail(ExitCode::kInternal, "lost track of child process " + std::to_string(pid_) + ": " +
                                  std::strerror(errno) + " (is SIGCHLD ignored?)");
  }
  return status_;
}

ExitStatus ChildProcess::wait() {
  if (status_) return *status_;
  int status = 0;
  pid_t reaped;
  do {
    reaped = waitpid(pid_, &status, 0);
  } while (reaped < 0 && errno == EINTR);
  if (reaped != pid_) {
    fail(ExitCode::kInternal, "lost track of child process " + std::to_string(pid_) + ": " +
                                  std::strerror(errno) + " (is SIGCHLD ignored?)");
  }
  status_ = decode(status);
  return *status_;
}

std::vector<Finished> finish_all(std::vector<ChildProcess>& children,
                                 std::optional<std::chrono::milliseconds> limit) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + limit.value_or(std::chrono::milliseconds(0));
  bool killed = false;
  std::vector<Finished> results(children.size());
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, Output>> sources;
    for (size_t i = 0; i < children.size(); ++i) {
      for (const Output stream : {Output::kStdout, Output::kStderr}) {
        if (children[i].fd(stream) < 0) continue;
        fds.push_back({children[i].fd(stream), POLLIN, 0});
        sources.push_back({i, stream});
      }
    }
    if (fds.empty()) break;
    int timeout = -1;
    if (limit && !killed) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        for (size_t i = 0; i < children.size(); ++i) {
          if (children[i].try_wait()) continue;
          children[i].signal_group(SIGKILL);
          results[i].timed_out = true;
        }
        killed = true;
      } else {
        timeout = static_cast<int>(std::min<long long>(left.count(), INT_MAX));
      }
    }
    if (poll(fds.data(), fds.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      fail(ExitCode::kRuntime, std::string("poll failed: ") + std::strerror(errno));
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const auto [child, stream] = sources[i];
      Finished& result = results[child];
      children[child].read(stream, stream == Output::kStdout ? result.out : result.err);
    }
  }
  for (size_t i = 0; i < children.size(); ++i) results[i].status = children[i].wait();
  return results;
}

}  // namespace mfsdp::launch
