#pragma once
// How signals reach launch()'s supervisor: while a SignalCatcher lives it handles SIGINT,
// SIGTERM, SIGCHLD and SIGPIPE (the previous handlers are restored when it dies), counts the
// interrupts and wakes the supervisor's poll(2) through a self-pipe. One at a time per
// process. No LibTorch.

#include <signal.h>

#include <iterator>

namespace mfsdp::launch {

class SignalCatcher {
 public:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGCHLD, SIGPIPE};

  // Throws Error(kInternal) when another SignalCatcher lives (launch() is already running).
  SignalCatcher();
  ~SignalCatcher();
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;

  // Readable after a signal other than SIGPIPE; drain() empties it.
  int wake_fd() const { return wake_read_; }
  void drain();
  // How many SIGINTs and SIGTERMs arrived, and the last of them (0 before any).
  int interrupts() const;
  int interrupt_signal() const;

 private:
  int wake_read_ = -1;
  struct sigaction previous_[std::size(kSignals)]{};
};

}  // namespace mfsdp::launch
