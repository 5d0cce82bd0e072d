#pragma once
// The test driver (launch() behind a tiny command line) running as a subprocess, so a test can
// read its output as it comes, signal it, and check how it ended.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "executor/launch/process.h"

namespace mfsdp::testing {

class LauncherProcess {
 public:
  // Starts MFSDP_LAUNCH_DRIVER with `driver_args`, `--`, MFSDP_LAUNCH_FAKE_WORKER and
  // `worker_args`, in this process's environment plus `env`.
  LauncherProcess(const std::vector<std::string>& driver_args,
                  const std::vector<std::string>& worker_args,
                  const std::vector<std::pair<std::string, std::string>>& env = {});

  pid_t pid() const { return process_.pid(); }
  void send(int signal);

  // Reads until the stdout (or stderr) read so far has `count` lines containing `needle`;
  // false when the driver ended or `limit` passed first.
  bool wait_for_stdout(const std::string& needle, int count,
                       std::chrono::milliseconds limit = std::chrono::seconds(20));
  bool wait_for_stderr(const std::string& needle, int count,
                       std::chrono::milliseconds limit = std::chrono::seconds(20));

  // The pid each worker printed with the fake worker's `pid` action, by rank.
  std::map<int, pid_t> worker_pids() const;

  // Reads to the end and waits; kills the driver if it is still running after `limit`.
  launch::ExitStatus finish(std::chrono::milliseconds limit = std::chrono::seconds(30));

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  bool wait_for(const std::string& text, const std::string& needle, int count,
                std::chrono::milliseconds limit);
  // One poll over both pipes, up to `timeout_ms`; false once both reached end of file.
  bool read_once(int timeout_ms);

  launch::ChildProcess process_;
  std::string out_;
  std::string err_;
};

// Lines of `text` without their newlines.
std::vector<std::string> lines_of(const std::string& text);

// True when no process has `pid` any more (kill(pid, 0) fails with ESRCH).
bool process_gone(pid_t pid);

}  // namespace mfsdp::testing
