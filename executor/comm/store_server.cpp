// StoreServer: one thread, one poll(2) loop over the listening socket and its connections.
// A connection is a stranger until its hello proves the secret; strangers may send nothing
// but that hello, get a few seconds to send it, and are counted and reported when refused.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "executor/comm/store.h"
#include "executor/comm/store_wire.h"

namespace mfsdp::executor {
namespace {

namespace wire = store_wire;
using Clock = std::chrono::steady_clock;

// A stranger must prove the secret this soon after connecting.
constexpr std::chrono::seconds kHelloWindow(10);
// Strangers held open at once; more are refused at once, so a flood cannot exhaust the host.
constexpr size_t kMaxStrangers = 64;
// Refusals reported on stderr, one line each; later ones are only counted.
constexpr int kReportedRefusals = 5;

std::string peer_name(const sockaddr_storage& address) {
  char host[NI_MAXHOST] = {};
  char port[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), sizeof address, host, sizeof host,
                  port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "an unknown peer";
  }
  return std::string(host) + ":" + port;
}

struct Connection {
  int fd = -1;
  std::string peer;
  bool trusted = false;  // proved the secret
  bool closing = false;  // hang up once `out` is sent
  wire::Nonce server_nonce{};
  Clock::time_point hello_deadline;
  std::string in;
  std::string out;
  // A Get or Wait whose keys are not all set yet.
  bool waiting = false;
  wire::Op wait_op = wire::Op::kWait;
  std::vector<std::string> wait_keys;
  Clock::time_point wait_deadline;
};

}  // namespace

struct StoreServer::Impl {
  std::string secret;
  std::string address;
  int listen_fd = -1;
  int wake_read = -1;
  int wake_write = -1;
  int port = 0;
  std::atomic<int> refused{0};
  std::map<std::string, std::string> values;
  bool changed = false;  // a key was set since waiters were last settled
  std::list<Connection> connections;
  std::thread thread;

  ~Impl() {
    for (Connection& c : connections) close(c.fd);
    for (int fd : {listen_fd, wake_read, wake_write}) {
      if (fd >= 0) close(fd);
    }
  }

  void refuse(Connection& c, const std::string& why) {
    const int count = ++refused;
    if (count <= kReportedRefusals) {
      std::fprintf(
          stderr, "mfsdp: warning: the rendezvous store on %s refused a connection from %s: %s%s\n",
          address.c_str(), c.peer.c_str(), why.c_str(),
          count == kReportedRefusals ? " (further refusals are not reported)" : "");
    }
    c.closing = true;
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage from{};
      socklen_t length = sizeof from;
      const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&from), &length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a connection that went away while queued
      Connection c;
      c.fd = fd;
      c.peer = peer_name(from);
      const size_t strangers = static_cast<size_t>(std::count_if(
          connections.begin(), connections.end(), [](const Connection& k) { return !k.trusted; }));
      if (strangers >= kMaxStrangers) {
        ++refused;
        close(fd);
        continue;
      }
      try {
        c.server_nonce = wire::random_nonce();
      } catch (const wire::WireError&) {
        close(fd);
        continue;
      }
      c.hello_deadline = Clock::now() + kHelloWindow;
      c.out = wire::greeting(c.server_nonce);
      connections.push_back(std::move(c));
    }
  }

  void answer(Connection& c, wire::Status status, const std::vector<std::string>& fields) {
    c.out += wire::encode(static_cast<uint8_t>(status), fields);
  }

  // Answers a waiting Get or Wait if its keys are set, or if its time is up.
  void settle(Connection& c, Clock::time_point now) {
    const bool all_set = std::all_of(c.wait_keys.begin(), c.wait_keys.end(),
                                     [&](const std::string& k) { return values.count(k) > 0; });
    if (all_set) {
      c.waiting = false;
      if (c.wait_op == wire::Op::kGet) {
        answer(c, wire::Status::kOk, {values[c.wait_keys[0]]});
      } else {
        answer(c, wire::Status::kOk, {});
      }
    } else if (now >= c.wait_deadline) {
      c.waiting = false;
      answer(c, wire::Status::kTimeout, {});
    }
  }

  void handle(Connection& c, const wire::Frame& request, Clock::time_point now) {
    switch (static_cast<wire::Op>(request.tag)) {
      case wire::Op::kSet:
        if (request.fields.size() != 2) break;
        values[request.fields[0]] = request.fields[1];
        changed = true;
        answer(c, wire::Status::kOk, {});
        return;
      case wire::Op::kCheck: {
        bool all_set = true;
        for (const std::string& k : request.fields) all_set = all_set && values.count(k) > 0;
        answer(c, wire::Status::kOk, {all_set ? "1" : "0"});
        return;
      }
      case wire::Op::kGet:
      case wire::Op::kWait: {
        const auto op = static_cast<wire::Op>(request.tag);
        if (request.fields.empty() || (op == wire::Op::kGet && request.fields.size() != 2)) break;
        long long wait_ms = 0;
        try {
          wait_ms = std::stoll(request.fields[0]);
        } catch (const std::exception&) {
          break;
        }
        if (wait_ms < 0) break;
        c.waiting = true;
        c.wait_op = op;
        c.wait_keys.assign(request.fields.begin() + 1, request.fields.end());
        c.wait_deadline = now + std::chrono::milliseconds(std::min(wait_ms, 1LL << 40));
        settle(c, now);
        return;
      }
    }
    answer(c, wire::Status::kError, {"a malformed request"});
    c.closing = true;
  }

  // Consumes what `c` sent: its hello while a stranger, then whole frames one at a time.
  void consume(Connection& c, Clock::time_point now) {
    if (!c.trusted) {
      if (c.in.size() < wire::kHelloBytes) return;
      const wire::HelloCheck hello = wire::check_hello(c.in, secret, c.server_nonce);
      if (hello.verdict == wire::HelloCheck::kNotARank) {
        refuse(c, "it is not an mfsdp rank (it did not greet as one)");
        return;
      }
      if (hello.verdict == wire::HelloCheck::kWrongSecret) {
        c.out.push_back(static_cast<char>(wire::kRefused));
        refuse(c, "it did not prove this run's secret (MFSDP_RDZV_SECRET)");
        return;
      }
      c.out += wire::acceptance(secret, c.server_nonce, hello.client_nonce);
      c.trusted = true;
      c.in.erase(0, wire::kHelloBytes);
    }
    while (!c.waiting && !c.closing) {
      std::optional<wire::Frame> request;
      try {
        request = wire::take_frame(c.in, "a request");
      } catch (const wire::WireError& e) {
        answer(c, wire::Status::kError, {e.what()});
        c.closing = true;
        return;
      }
      if (!request) return;
      handle(c, *request, now);
    }
  }

  // Reads what arrived; false once the peer has hung up or the connection failed.
  bool receive(Connection& c) {
    char buffer[64 * 1024];
    for (;;) {
      // A stranger's bytes beyond its hello are never needed: read no more than that.
      const size_t room =
          c.trusted ? sizeof buffer : std::min(sizeof buffer, wire::kHelloBytes - c.in.size());
      if (room == 0) return true;
      const ssize_t n = recv(c.fd, buffer, room, 0);
      if (n > 0) {
        c.in.append(buffer, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
  }

  bool transmit(Connection& c) {
    while (!c.out.empty()) {
      const ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    return true;
  }

  void serve() {
    for (;;) {
      Clock::time_point now = Clock::now();
      Clock::time_point next = now + std::chrono::seconds(1);
      std::vector<pollfd> fds = {{wake_read, POLLIN, 0}, {listen_fd, POLLIN, 0}};
      std::vector<Connection*> polled;
      for (Connection& c : connections) {
        short events = c.closing ? 0 : POLLIN;
        if (!c.out.empty()) events |= POLLOUT;
        fds.push_back({c.fd, events, 0});
        polled.push_back(&c);
        if (!c.trusted) next = std::min(next, c.hello_deadline);
        if (c.waiting) next = std::min(next, c.wait_deadline);
      }
      const auto wait_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
      if (poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(wait_ms, 0))) < 0 &&
          errno != EINTR) {
        return;
      }
      if (fds[0].revents != 0) return;  // the destructor asks the thread to stop
      now = Clock::now();
      for (size_t i = 0; i < polled.size(); ++i) {
        Connection& c = *polled[i];
        bool alive = true;
        if (fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) {
          alive = receive(c);
          if (alive && !c.closing) {
            try {
              consume(c, now);
            } catch (const std::exception& e) {  // an HMAC failure, or out of memory
              answer(c, wire::Status::kError, {e.what()});
              c.closing = true;
            }
          }
        }
        if (!alive) {
          c.closing = true;
          c.out.clear();
        }
      }
      for (Connection& c : connections) {
        if (!c.trusted && !c.closing && now >= c.hello_deadline) {
          refuse(c, "it did not prove this run's secret within " +
                        std::to_string(kHelloWindow.count()) + " s");
        }
        if (c.waiting && (changed || now >= c.wait_deadline)) settle(c, now);
      }
      changed = false;
      for (auto it = connections.begin(); it != connections.end();) {
        const bool sent = transmit(*it);
        if (!sent || (it->closing && it->out.empty())) {
          close(it->fd);
          it = connections.erase(it);
        } else {
          ++it;
        }
      }
      if (fds[1].revents & POLLIN) accept_all();
    }
  }
};

StoreServer::StoreServer(const std::string& host, int port, std::string secret)
    : impl_(std::make_unique<Impl>()) {
  impl_->secret = std::move(secret);
  const std::string where = host + ":" + std::to_string(port);
  if (port < 0 || port > 65535) {
    throw StoreError("the rendezvous port " + std::to_string(port) + " is out of range 0..65535");
  }
  const wire::Addresses addresses = wire::resolve(host, port, true);
  std::string last_error = "no address";
  for (const addrinfo* a = addresses.get(); a != nullptr && impl_->listen_fd < 0; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // a port in TIME_WAIT is free
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      const int error = errno;
      last_error = std::strerror(error);
      if (error == EADDRINUSE) last_error += " (another program, or another run, holds the port)";
      if (error == EADDRNOTAVAIL) {
        last_error += " ('" + host + "' is not an address of this host; name one with " +
                      "--rdzv-bind, or 0.0.0.0 for every interface)";
      }
      close(fd);
      continue;
    }
    impl_->listen_fd = fd;
  }
  if (impl_->listen_fd < 0) throw StoreError("cannot listen on " + where + ": " + last_error);

  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&bound), &length);
  impl_->port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  impl_->address = host + ":" + std::to_string(impl_->port);

  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0)
    throw StoreError("cannot create a pipe: " + std::string(std::strerror(errno)));
  impl_->wake_read = wake[0];
  impl_->wake_write = wake[1];
  impl_->thread = std::thread([impl = impl_.get()] { impl->serve(); });
}

StoreServer::~StoreServer() {
  const char stop = 's';
  if (write(impl_->wake_write, &stop, 1) < 0) {
    // The pipe cannot be full or closed; the join below would show it by hanging.
  }
  impl_->thread.join();
}

int StoreServer::port() const {
  return impl_->port;
}

int StoreServer::refused() const {
  return impl_->refused.load();
}

}  // namespace mfsdp::executor
