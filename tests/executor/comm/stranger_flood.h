#pragma once
// A flood of strangers at a rendezvous port, as an attacker on the same host or network would
// send one: connections that say nothing, and connections that send a byte of a hello now and
// then, each opened again as soon as the store drops it, until the flood is stopped.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace mfsdp::testing {

class StrangerFlood {
 public:
  // `silent` + `slow` connections to 127.0.0.1:`port`, from `source` (another loopback
  // address, e.g. 127.0.0.2, or "" for the kernel's choice).
  StrangerFlood(int port, int silent, int slow, std::string source = "")
      : port_(port), source_(std::move(source)) {
    raise_descriptor_limit(silent + slow);
    for (int i = 0; i < silent + slow; ++i) slots_.push_back({-1, i >= silent});
    thread_ = std::thread([this] { flood(); });
  }
  ~StrangerFlood() { stop(); }
  StrangerFlood(const StrangerFlood&) = delete;
  StrangerFlood& operator=(const StrangerFlood&) = delete;

  void stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
    for (Slot& s : slots_) {
      if (s.fd >= 0) ::close(s.fd);
      s.fd = -1;
    }
  }
  // Connections the store accepted so far, and how many of them it closed.
  int connected() const { return connected_.load(); }
  int dropped() const { return dropped_.load(); }

  // A connection to 127.0.0.1:port from `source`; -1 when it cannot be made.
  static int connect_from(int port, const std::string& source) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (!source.empty()) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      inet_pton(AF_INET, source.c_str(), &from.sin_addr);
      if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
        ::close(fd);
        return -1;
      }
    }
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

 private:
  struct Slot {
    int fd;
    bool slow;
    int sent = 0;
  };

  static void raise_descriptor_limit(int wanted) {
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) != 0) return;
    const rlim_t need = static_cast<rlim_t>(wanted) + 256;
    if (files.rlim_cur < need) {
      files.rlim_cur = std::min(need, files.rlim_max);
      setrlimit(RLIMIT_NOFILE, &files);
    }
  }

  void flood() {
    auto last_trickle = std::chrono::steady_clock::now();
    while (!done_) {
      bool opened = false;
      for (Slot& s : slots_) {
        if (s.fd >= 0 || done_) continue;
        s.fd = connect_from(port_, source_);
        s.sent = 0;
        if (s.fd < 0) break;  // nothing listens yet: try again after the pause below
        ++connected_;
        opened = true;
      }
      std::vector<pollfd> fds;
      for (const Slot& s : slots_) fds.push_back({s.fd, POLLIN, 0});
      // Nothing listens yet, or no descriptor is left: pace the attempts rather than spin.
      ::poll(fds.data(), fds.size(), opened ? 1 : 20);
      for (size_t i = 0; i < slots_.size(); ++i) {
        Slot& s = slots_[i];
        if (s.fd < 0 || fds[i].revents == 0) continue;
        char buffer[256];
        if (::recv(s.fd, buffer, sizeof buffer, MSG_DONTWAIT) == 0 ||
            (fds[i].revents & (POLLHUP | POLLERR))) {
          ::close(s.fd);  // the store let go of it: take its place again
          s.fd = -1;
          ++dropped_;
        }
      }
      const auto now = std::chrono::steady_clock::now();
      if (now - last_trickle >= std::chrono::milliseconds(100)) {
        last_trickle = now;
        for (Slot& s : slots_) {
          if (s.fd < 0 || !s.slow) continue;
          const char byte = "MFSDPRDZ"[s.sent++ % 8];
          ::send(s.fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
      }
    }
  }

  int port_;
  std::string source_;
  std::vector<Slot> slots_;
  std::atomic<bool> done_{false};
  std::atomic<int> connected_{0};
  std::atomic<int> dropped_{0};
  std::thread thread_;
};

}  // namespace mfsdp::testing
