#include "executor/launch/signal_catcher.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "schema/error.h"

namespace mfsdp::launch {
namespace {

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

}  // namespace

SignalCatcher::SignalCatcher() {
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

SignalCatcher::~SignalCatcher() {
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
  close(wake_read_);
  close(g_wake_write);
  g_wake_write = -1;
  g_launching = false;
}

void SignalCatcher::drain() {
  char buffer[256];
  while (::read(wake_read_, buffer, sizeof buffer) > 0) {
  }
}

int SignalCatcher::interrupts() const {
  return g_interrupts;
}

int SignalCatcher::interrupt_signal() const {
  return g_interrupt_signal;
}

}  // namespace mfsdp::launch
