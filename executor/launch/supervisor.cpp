#include "executor/launch/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <string>

#include "executor/launch/log_files.h"
#include "executor/launch/signal_catcher.h"
#include "schema/error.h"

namespace mfsdp::launch {
namespace {

using Clock = std::chrono::steady_clock;

void say(const std::string& line) {
  const std::string text = "mfsdp run: " + line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string describe(std::chrono::milliseconds duration) {
  if (duration.count() % 1000 == 0) return std::to_string(duration.count() / 1000) + " s";
  return std::to_string(duration.count()) + " ms";
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

class Supervisor {
 public:
  Supervisor(const LaunchOptions& options, std::vector<Worker>& workers, SignalCatcher& signals,
             const ErrorLines& errors)
      : options_(options), workers_(workers), signals_(signals), errors_(errors) {}

  int run() {
    while (running_count() > 0) {
      wait_for_events();
      signals_.drain();
      handle_interrupts();
      collect_exits();
      if (phase_ == Phase::kStopping && Clock::now() >= deadline_) kill_remaining();
    }
    for (Worker& worker : workers_) {
      // A process the worker left behind may still hold its pipes: take what is there.
      worker.read_all(Output::kStdout);
      worker.read_all(Output::kStderr);
      worker.output.finish(Output::kStdout);
      worker.output.finish(Output::kStderr);
    }
    if (interrupt_signal_ != 0 && !failed_) return 128 + interrupt_signal_;
    if (failed_) {
      const size_t blamed = root_cause();
      report_failure(workers_[blamed], workers_[*failed_]);
      return workers_[blamed].status->shell_status();
    }
    return 0;
  }

 private:
  enum class Phase { kRunning, kStopping, kKilled };

  int running_count() const {
    int count = 0;
    for (const Worker& worker : workers_) count += worker.status ? 0 : 1;
    return count;
  }

  std::vector<int> running_ranks() const {
    std::vector<int> ranks;
    for (const Worker& worker : workers_) {
      if (!worker.status) ranks.push_back(worker.rank);
    }
    return ranks;
  }

  void wait_for_events() {
    std::vector<pollfd> fds = {{signals_.wake_fd(), POLLIN, 0}};
    std::vector<std::pair<Worker*, Output>> sources = {{nullptr, Output::kStdout}};
    for (Worker& worker : workers_) {
      for (const Output stream : {Output::kStdout, Output::kStderr}) {
        if (worker.process.fd(stream) < 0) continue;
        fds.push_back({worker.process.fd(stream), POLLIN, 0});
        sources.push_back({&worker, stream});
      }
    }
    int timeout = -1;
    if (phase_ == Phase::kStopping) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - Clock::now());
      timeout = static_cast<int>(std::max<long long>(0, left.count()));
    }
    if (poll(fds.data(), fds.size(), timeout) < 0) {
      if (errno == EINTR) return;
      fail(ExitCode::kRuntime, std::string("poll failed: ") + std::strerror(errno));
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) sources[i].first->read_some(sources[i].second);
    }
  }

  void handle_interrupts() {
    const int interrupts = signals_.interrupts();
    if (interrupts == seen_interrupts_) return;
    seen_interrupts_ = interrupts;
    const bool first = interrupt_signal_ == 0;
    if (first) interrupt_signal_ = signals_.interrupt_signal();
    if (phase_ == Phase::kRunning) {
      stop("interrupted by " + signal_name(interrupt_signal_));
    } else if (phase_ == Phase::kStopping && (!first || failed_)) {
      say("interrupted again; killing " + rank_list(running_ranks()) + " now (SIGKILL)");
      kill_remaining_quietly();
    }
  }

  void collect_exits() {
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& worker = workers_[i];
      if (worker.status) continue;
      const std::optional<ExitStatus> status = worker.process.try_wait();
      if (!status) continue;
      worker.read_all(Output::kStdout);
      worker.read_all(Output::kStderr);
      worker.status = status;
      if (status->ok()) continue;
      failures_.push_back(i);
      if (phase_ != Phase::kRunning) continue;
      failed_ = i;
      stop("rank " + std::to_string(worker.rank) + " " + status->describe());
    }
  }

  // SIGTERM to every worker still running; SIGKILL once the grace period is over.
  void stop(const std::string& reason) {
    phase_ = Phase::kStopping;
    deadline_ = Clock::now() + options_.grace;
    const std::vector<int> ranks = running_ranks();
    if (ranks.empty()) return;
    say(reason + "; stopping " + rank_list(ranks) + " (SIGTERM, then SIGKILL after " +
        describe(options_.grace) + ")");
    for (Worker& worker : workers_) {
      if (!worker.status) worker.process.signal_group(SIGTERM);
    }
  }

  void kill_remaining() {
    const std::vector<int> ranks = running_ranks();
    if (!ranks.empty()) {
      say(rank_list(ranks) + (ranks.size() == 1 ? " is" : " are") + " still running " +
          describe(options_.grace) + " after SIGTERM; killing " +
          (ranks.size() == 1 ? "it" : "them") + " (SIGKILL)");
    }
    kill_remaining_quietly();
  }

  void kill_remaining_quietly() {
    phase_ = Phase::kKilled;
    for (Worker& worker : workers_) {
      if (!worker.status) worker.process.signal_group(SIGKILL);
    }
  }

  // The rank to blame: the first to fail, unless it failed in a collective or the rendezvous
  // (exit 6: what a rank sees when a peer exits under it) while another rank exited with an
  // error of its own (another code, before it was stopped or while stopping): that is the
  // cause, and its exit code is the run's.
  size_t root_cause() const {
    const size_t first = *failed_;
    const int runtime = static_cast<int>(ExitCode::kRuntime);
    if (workers_[first].status->shell_status() != runtime) return first;
    for (size_t i : failures_) {
      const ExitStatus& status = *workers_[i].status;
      if (status.signal == 0 && status.code != runtime && status.code < 128) return i;
    }
    return first;
  }

  void report_failure(const Worker& worker, const Worker& first) {
    const std::deque<std::string>& lines = worker.output.recent();
    std::string where;
    if (!options_.log_dir.empty()) {
      where = " (all of it: " + LogFiles::path(options_.log_dir, worker.rank) + ")";
    }
    std::string summary = "rank " + std::to_string(worker.rank) + " failed first: it " +
                          worker.status->describe() + " (pid " +
                          std::to_string(worker.process.pid()) + ")";
    if (&worker != &first) {
      summary = "rank " + std::to_string(first.rank) + " failed first (it " +
                first.status->describe() + ", losing a peer), but the cause is rank " +
                std::to_string(worker.rank) + ": it " + worker.status->describe() + " (pid " +
                std::to_string(worker.process.pid()) + ")";
    }
    // An error line every rank printed was passed on once, as it came: point at it.
    if (options_.log_dir.empty() && !lines.empty() && ErrorLines::is_error(lines.back())) {
      const std::vector<int> ranks = errors_.ranks_of(lines.back());
      say(summary + " with the error above" +
          (ranks.size() > 1 ? " (" + rank_list(ranks) + " printed it; shown once)" : ""));
      return;
    }
    if (lines.empty()) {
      say(summary + "; it printed nothing" + where);
      return;
    }
    say(summary + "; its last " + std::to_string(lines.size()) + " line" +
        (lines.size() == 1 ? "" : "s") + " of output" + where + ":");
    std::string text;
    for (const std::string& line : lines) {
      text += "[rank " + std::to_string(worker.rank) + "] " + line + "\n";
    }
    ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
    (void)ignored;
  }

  const LaunchOptions& options_;
  std::vector<Worker>& workers_;
  SignalCatcher& signals_;
  const ErrorLines& errors_;
  Phase phase_ = Phase::kRunning;
  Clock::time_point deadline_;
  std::optional<size_t> failed_;
  std::vector<size_t> failures_;  // every worker that exited non-zero, in order
  int interrupt_signal_ = 0;
  int seen_interrupts_ = 0;
};

}  // namespace

void Worker::read_some(Output stream) {
  std::string bytes;
  const ChildProcess::Read result = process.read(stream, bytes);
  if (result == ChildProcess::Read::kData) output.add(stream, bytes);
  if (result == ChildProcess::Read::kEnd) output.finish(stream);
}

void Worker::read_all(Output stream) {
  std::string bytes;
  ChildProcess::Read result;
  while ((result = process.read(stream, bytes)) == ChildProcess::Read::kData) {
    output.add(stream, bytes);
    bytes.clear();
  }
  if (result == ChildProcess::Read::kEnd) output.finish(stream);
}

int supervise(const LaunchOptions& options, std::vector<Worker>& workers, SignalCatcher& signals,
              const ErrorLines& errors) {
  return Supervisor(options, workers, signals, errors).run();
}

}  // namespace mfsdp::launch
