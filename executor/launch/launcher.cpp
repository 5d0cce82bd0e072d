#include "executor/launch/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iterator>
#include <optional>

#include "executor/launch/process.h"
#include "executor/launch/rank_output.h"
#include "schema/error.h"

namespace mfsdp::launch {
namespace {

using Clock = std::chrono::steady_clock;

const char* const kLaunchVariables[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
constexpr long long kMaxWorldSize = 1 << 30;  // what LaunchEnv accepts

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

class Socket {
 public:
  explicit Socket(int family) : fd_(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0)) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Binds `port` on every interface the way the store will (SO_REUSEADDR, so a port left in
// TIME_WAIT by the last run counts as free). Returns 0 or the errno of the failed bind.
int try_bind(int family, int port, int* bound_port) {
  Socket s(family);
  if (s.fd() < 0) return errno;
  const int one = 1;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage address{};
  socklen_t length;
  if (family == AF_INET) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
    v4->sin_family = AF_INET;
    v4->sin_addr.s_addr = htonl(INADDR_ANY);
    v4->sin_port = htons(static_cast<uint16_t>(port));
    length = sizeof *v4;
  } else {
    setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
    v6->sin6_family = AF_INET6;
    v6->sin6_addr = in6addr_any;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    length = sizeof *v6;
  }
  if (bind(s.fd(), reinterpret_cast<sockaddr*>(&address), length) != 0) return errno;
  if (bound_port != nullptr) {
    if (getsockname(s.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) return errno;
    *bound_port = ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  }
  return 0;
}

// The MASTER_PORT the workers get. Node 0's rank 0 will host the store there, so on node 0 a
// port in use fails now, before anything starts, instead of as a store error in rank 0.
int master_port_for_workers(const LaunchOptions& options) {
  if (options.node_rank != 0) return options.master_port;
  const std::string fix = "; pick another with --master-port or use --master-port 0";
  if (options.master_port == 0) {
    // Free when we look; another program could still take it before rank 0 binds it.
    int port = 0;
    if (const int error = try_bind(AF_INET, 0, &port)) {
      fail(ExitCode::kRuntime,
           std::string("cannot find a free port for --master-port 0: ") + std::strerror(error));
    }
    return port;
  }
  const std::string port = std::to_string(options.master_port);
  for (const int family : {AF_INET, AF_INET6}) {
    const int error = try_bind(family, options.master_port, nullptr);
    // A machine without IPv6 has no IPv6 port to be in use.
    if (error == 0 || (family == AF_INET6 && (error == EAFNOSUPPORT || error == EADDRNOTAVAIL))) {
      continue;
    }
    if (error == EADDRINUSE) fail(ExitCode::kUsage, "port " + port + " is in use" + fix);
    fail(ExitCode::kUsage,
         "--master-port " + port + " cannot be bound (" + std::strerror(error) + ")" + fix);
  }
  return options.master_port;
}

class LogFiles {
 public:
  LogFiles() = default;
  ~LogFiles() {
    for (const int fd : fds_) close(fd);
  }
  LogFiles(const LogFiles&) = delete;
  LogFiles& operator=(const LogFiles&) = delete;

  static std::string path(const std::string& dir, int rank) {
    return (std::filesystem::path(dir) / ("rank-" + std::to_string(rank) + ".log")).string();
  }

  // Opens (truncating) log_dir/rank-N.log for each rank of this node.
  void open_all(const std::string& dir, int first_rank, int count) {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) {
      fail(ExitCode::kIo, "--log-dir " + dir + ": cannot create it (" + error.message() +
                              "); give a writable directory");
    }
    for (int rank = first_rank; rank < first_rank + count; ++rank) {
      const std::string file = path(dir, rank);
      // Never through a link someone planted there: it would truncate whatever it points at.
      const int fd =
          open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (fd < 0 && errno == ELOOP) {
        fail(ExitCode::kIo, "--log-dir " + dir + ": " + file +
                                " is a symbolic link, and logs are not written through links; "
                                "remove it or give another directory");
      }
      if (fd < 0) {
        fail(ExitCode::kIo, "--log-dir " + dir + ": cannot write " + file + " (" +
                                std::strerror(errno) + "); give a writable directory");
      }
      fds_.push_back(fd);
    }
  }
  int fd(int index) const { return fds_[static_cast<size_t>(index)]; }

 private:
  std::vector<int> fds_;
};

// Signals reach the supervisor through a self-pipe: the handler only records and write()s.
int g_wake_write = -1;
volatile sig_atomic_t g_interrupts = 0;
volatile sig_atomic_t g_interrupt_signal = 0;
std::atomic<bool> g_launching{false};

extern "C" void on_launcher_signal(int signal) {
  const int saved_errno = errno;
  if (signal == SIGINT || signal == SIGTERM) {
    g_interrupt_signal = signal;
    g_interrupts = g_interrupts + 1;
  }
  // SIGPIPE is caught only so that a closed stdout does not kill the launcher.
  if (signal != SIGPIPE) {
    const char byte = 0;
    ssize_t ignored = ::write(g_wake_write, &byte, 1);
    (void)ignored;
  }
  errno = saved_errno;
}

class SignalCatcher {
 public:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGCHLD, SIGPIPE};

  SignalCatcher() {
    if (g_launching.exchange(true)) {
      fail(ExitCode::kInternal, "launch() is already running in this process");
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      g_launching = false;
      fail(ExitCode::kRuntime, std::string("cannot create a pipe: ") + std::strerror(errno));
    }
    wake_read_ = fds[0];
    g_wake_write = fds[1];
    g_interrupts = 0;
    g_interrupt_signal = 0;
    struct sigaction action {};
    action.sa_handler = on_launcher_signal;
    sigfillset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (size_t i = 0; i < std::size(kSignals); ++i) {
      sigaction(kSignals[i], &action, &previous_[i]);
    }
  }
  ~SignalCatcher() {
    for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
    close(wake_read_);
    close(g_wake_write);
    g_wake_write = -1;
    g_launching = false;
  }
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;

  int wake_fd() const { return wake_read_; }
  void drain() {
    char buffer[256];
    while (::read(wake_read_, buffer, sizeof buffer) > 0) {
    }
  }
  int interrupts() const { return g_interrupts; }
  int interrupt_signal() const { return g_interrupt_signal; }

 private:
  int wake_read_ = -1;
  struct sigaction previous_[std::size(kSignals)]{};
};

struct Worker {
  int rank;
  ChildProcess process;
  RankOutput output;
  std::optional<ExitStatus> status;

  // One read per call, so a rank that prints without pause cannot starve the others.
  void read_some(Output stream) {
    std::string bytes;
    const ChildProcess::Read result = process.read(stream, bytes);
    if (result == ChildProcess::Read::kData) output.add(stream, bytes);
    if (result == ChildProcess::Read::kEnd) output.finish(stream);
  }
  // Everything there is now: after the worker exited, so its report includes its last words.
  void read_all(Output stream) {
    std::string bytes;
    ChildProcess::Read result;
    while ((result = process.read(stream, bytes)) == ChildProcess::Read::kData) {
      output.add(stream, bytes);
      bytes.clear();
    }
    if (result == ChildProcess::Read::kEnd) output.finish(stream);
  }
};

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

void check_options(const LaunchOptions& o) {
  if (o.argv.empty() || o.argv[0].empty()) {
    fail(ExitCode::kInternal, "launch: no worker program given");
  }
  if (o.nproc_per_node < 1) {
    fail(ExitCode::kUsage, "--nproc-per-node " + std::to_string(o.nproc_per_node) +
                               " is not allowed; start at least 1 process per node");
  }
  if (o.nnodes < 1) {
    fail(ExitCode::kUsage,
         "--nnodes " + std::to_string(o.nnodes) + " is not allowed; give at least 1");
  }
  if (static_cast<long long>(o.nproc_per_node) * o.nnodes > kMaxWorldSize) {
    fail(ExitCode::kUsage, "--nproc-per-node " + std::to_string(o.nproc_per_node) +
                               " times --nnodes " + std::to_string(o.nnodes) +
                               " is more ranks than supported (" + std::to_string(kMaxWorldSize) +
                               "); give fewer");
  }
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    fail(ExitCode::kUsage, "--node-rank " + std::to_string(o.node_rank) +
                               " is out of range for --nnodes " + std::to_string(o.nnodes) +
                               "; use 0.." + std::to_string(o.nnodes - 1));
  }
  if (o.master_addr.empty()) {
    fail(ExitCode::kUsage, "--master-addr is empty; give the host name or address of node 0");
  }
  if (o.master_port < 0 || o.master_port > 65535) {
    fail(ExitCode::kUsage, "--master-port " + std::to_string(o.master_port) +
                               " is out of range; use 1..65535, or 0 to pick a free port");
  }
  if (o.master_port == 0 && o.nnodes > 1) {
    fail(ExitCode::kUsage,
         "--master-port 0 (pick a free port) works only with --nnodes 1, since the other nodes "
         "could not know the port; give every node the same --master-port");
  }
  if (o.grace.count() < 0) {
    fail(ExitCode::kUsage,
         "--grace " + std::to_string(o.grace.count()) + " ms is negative; give 0 or more");
  }
  for (const auto& [name, value] : o.extra_env) {
    if (name.empty() || name.find('=') != std::string::npos) {
      fail(ExitCode::kUsage, "environment variable name '" + name +
                                 "' is not valid; use NAME=VALUE with a NAME without '='");
    }
    for (const char* launch_variable : kLaunchVariables) {
      if (name == launch_variable) {
        fail(ExitCode::kUsage, name +
                                   " is set by the launcher for each rank; do not set it "
                                   "yourself (use the launch flags instead)");
      }
    }
  }
}

int launch(const LaunchOptions& options) {
  check_options(options);
  const int master_port = master_port_for_workers(options);
  LogFiles logs;
  if (!options.log_dir.empty()) {
    logs.open_all(options.log_dir, options.node_rank * options.nproc_per_node,
                  options.nproc_per_node);
  }

  SignalCatcher signals;
  ErrorLines errors;
  std::vector<Worker> workers;
  workers.reserve(static_cast<size_t>(options.nproc_per_node));
  for (int local_rank = 0; local_rank < options.nproc_per_node; ++local_rank) {
    const int rank = options.node_rank * options.nproc_per_node + local_rank;
    std::vector<std::pair<std::string, std::string>> variables = {
        {"RANK", std::to_string(rank)},
        {"WORLD_SIZE", std::to_string(options.nnodes * options.nproc_per_node)},
        {"LOCAL_RANK", std::to_string(local_rank)},
        {"LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node)},
        {"MASTER_ADDR", options.master_addr},
        {"MASTER_PORT", std::to_string(master_port)}};
    variables.insert(variables.end(), options.extra_env.begin(), options.extra_env.end());
    // A worker that cannot start throws; the vector's destructor then kills those started.
    ChildProcess process(options.argv, environment_with(variables));
    RankOutput output =
        options.log_dir.empty()
            ? RankOutput(rank, STDOUT_FILENO, STDERR_FILENO, true, "stdout/stderr", 10, &errors)
            : RankOutput(rank, logs.fd(local_rank), logs.fd(local_rank), false,
                         LogFiles::path(options.log_dir, rank));
    workers.push_back(Worker{rank, std::move(process), std::move(output), std::nullopt});
  }
  return Supervisor(options, workers, signals, errors).run();
}

}  // namespace mfsdp::launch
