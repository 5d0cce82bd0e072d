#pragma once
// One child process started without a shell: its stdout and stderr come back through pipes,
// stdin is /dev/null, it leads a process group of its own (so signalling it reaches whatever
// it started), and it is killed with SIGKILL if the thread that started it dies. No LibTorch.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mfsdp::launch {

// How a process ended, as waitpid(2) tells it.
struct ExitStatus {
  int code = 0;    // its exit code, when it exited
  int signal = 0;  // the signal that killed it, or 0 when it exited

  bool ok() const { return signal == 0 && code == 0; }
  // What a shell would report: the exit code, or 128 + the signal.
  int shell_status() const { return signal != 0 ? 128 + signal : code; }
  // "exited with code 3", "was killed by SIGKILL".
  std::string describe() const;
};

// "SIGKILL" for the common signals, "signal 42" for the others.
std::string signal_name(int signal);

// This process's environment, NAME=VALUE, with `overrides` set: a variable of the same name is
// replaced, others are added in the given order.
std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& overrides);

enum class Output { kStdout, kStderr };

class ChildProcess {
 public:
  // Starts argv[0] (a path; PATH is not searched) with `argv` and exactly `environment`, in
  // `working_directory` unless it is empty (then in ours). Returns once the program has been
  // exec'd. Throws Error(kRuntime) naming the program when it cannot be started (missing, not
  // executable, no such working directory, ...).
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
               const std::string& working_directory = "");
  // Still running: SIGKILLs its process group and reaps it. Closes the pipes.
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // The non-blocking read end of a pipe, for poll(2); -1 once it reached end of file.
  int fd(Output output) const { return output == Output::kStdout ? out_fd_ : err_fd_; }

  enum class Read { kData, kNothingNow, kEnd };
  // One read(2) of what the child wrote, appended to `into`. kEnd: end of file (every writer,
  // the child and anything it started, has closed the pipe); the pipe is then closed.
  Read read(Output output, std::string& into);

  // Sends `signal` to the child's process group. Does nothing once the child has been reaped,
  // so a recycled pid is never signalled.
  void signal_group(int signal);

  // Reaps the child if it has ended (waitpid WNOHANG); then, and on later calls, its status.
  std::optional<ExitStatus> try_wait();
  // Blocks until the child has ended.
  ExitStatus wait();

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::optional<ExitStatus> status_;
};

// What a child printed and how it ended.
struct Finished {
  ExitStatus status;
  std::string out;
  std::string err;
  bool timed_out = false;  // still running at the limit, so its process group was SIGKILLed
};

// Reads what each child prints until it has closed stdout and stderr, then reaps it; results in
// the order of `children`. One poll(2) over every pipe, so a child that fills one pipe never
// waits while another is read. With a limit, the process group of each child still running when
// it passes is killed, so a hang ends instead of stalling the caller.
std::vector<Finished> finish_all(std::vector<ChildProcess>& children,
                                 std::optional<std::chrono::milliseconds> limit = std::nullopt);

}  // namespace mfsdp::launch
