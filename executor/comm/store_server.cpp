// StoreServer: one thread, one poll(2) loop over the listening socket and its connections.
// A connection is a stranger until its hello proves the secret; strangers may send nothing
// but that hello, get a few seconds to send it, and are counted and reported when refused.
//
// A flood of strangers costs the flooder more than the store: every connection is accepted,
// and when the strangers' places are full the newest takes the place of the oldest from the
// address holding the most, so a rank, which answers the greeting at once, gets in and is
// trusted before a flood can push it out, and a flood from one address pushes out only its own.
// A trusted connection is never dropped for a stranger; what it may store and leave unread is
// bounded by StoreLimits.
//
// Over 400 lines on purpose: the poll loop, the connections' states and the requests share one
// thread's state (Impl) and read best in one place; the stranger count is store_strangers.*.

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
#include <tuple>
#include <utility>

#include "executor/comm/store.h"
#include "executor/comm/store_strangers.h"
#include "executor/comm/store_wire.h"

namespace mfsdp::executor {
namespace {

namespace wire = store_wire;
using Clock = std::chrono::steady_clock;

// Refusals reported on stderr, one line each; later ones are only counted.
constexpr int kReportedRefusals = 5;
// Requests one connection may have buffered: one frame of the largest size, its length first.
constexpr size_t kMaxUnreadBytes = wire::kMaxFrameBytes + 4;
// While no descriptor is left to accept a connection with, and no stranger to drop for one.
constexpr std::chrono::milliseconds kAcceptPause(100);
// Connections accepted in one turn of the loop, before it serves the others again: a flood
// that never lets the accept queue run dry must not keep the ranks' requests waiting.
constexpr int kAcceptsPerTurn = 32;

// The peer's address, and the same with its port.
std::pair<std::string, std::string> peer_name(const sockaddr_storage& address) {
  char host[NI_MAXHOST] = {};
  char port[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), sizeof address, host, sizeof host,
                  port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return {"?", "an unknown peer"};
  }
  return {host, std::string(host) + ":" + port};
}

struct Connection {
  int fd = -1;
  std::string host;      // the peer's address
  std::string peer;      // and its port
  bool trusted = false;  // proved the secret
  bool closing = false;  // hang up once `out` is sent
  wire::Nonce server_nonce{};
  Clock::time_point hello_deadline;
  std::string in;
  std::string out;
  bool held_back = false;  // requests left unhandled while its answers were unsent
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
  StoreLimits limits;
  StrangerPlaces strangers;
  std::atomic<int> refused{0};
  std::atomic<size_t> most_unsent{0};
  Clock::time_point accept_paused_until;
  std::map<std::string, std::string> values;
  size_t stored_bytes = 0;            // of the keys and values
  bool changed = false;               // a key was set since waiters were last settled
  std::list<Connection> connections;  // in the order they came
  std::thread thread;

  explicit Impl(const StoreLimits& store_limits) : limits(store_limits), strangers(store_limits) {}

  ~Impl() {
    for (Connection& c : connections) close(c.fd);
    for (int fd : {listen_fd, wake_read, wake_write}) {
      if (fd >= 0) close(fd);
    }
  }

  void report(const std::string& peer, const std::string& why) {
    const int count = ++refused;
    if (count <= kReportedRefusals) {
      std::fprintf(
          stderr, "mfsdp: warning: the rendezvous store on %s refused a connection from %s: %s%s\n",
          address.c_str(), peer.c_str(), why.c_str(),
          count == kReportedRefusals ? " (further refusals are not reported)" : "");
    }
  }

  void refuse(Connection& c, const std::string& why) {
    report(c.peer, why);
    c.closing = true;
  }

  std::list<Connection>::iterator forget(std::list<Connection>::iterator it) {
    if (!it->trusted) strangers.release(it->host);
    close(it->fd);
    return connections.erase(it);
  }

  // Closes the oldest stranger of the address that holds the most strangers; false if there is
  // none. Connections are kept in the order they came, so the first of an address is its oldest.
  bool drop_a_stranger() {
    const std::optional<std::string> host = strangers.most_held_address();
    if (!host) return false;
    for (auto it = connections.begin(); it != connections.end(); ++it) {
      if (it->trusted || it->host != *host) continue;
      if (!it->closing) {
        report(it->peer,
               "it had not proved this run's secret when newer connections needed "
               "its place (" +
                   std::to_string(strangers.places()) + " strangers at most)");
      }
      forget(it);
      return true;
    }
    return false;
  }

  void accept_some(Clock::time_point now) {
    for (int turn = 0; turn < kAcceptsPerTurn; ++turn) {
      sockaddr_storage from{};
      socklen_t length = sizeof from;
      const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&from), &length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // No descriptor left for it: a stranger's place is the one to give up, else wait.
          if (drop_a_stranger()) continue;
          accept_paused_until = now + kAcceptPause;
        }
        return;  // EAGAIN, or a connection that went away while queued
      }
      Connection c;
      c.fd = fd;
      std::tie(c.host, c.peer) = peer_name(from);
      try {
        c.server_nonce = wire::random_nonce();
      } catch (const wire::WireError&) {
        close(fd);
        continue;
      }
      if (strangers.full()) drop_a_stranger();
      c.hello_deadline = now + limits.hello_window;
      c.out = wire::greeting(c.server_nonce);
      transmit(c);  // at once: the sooner a rank has its greeting, the sooner it is trusted
      strangers.admit(c.host);
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
      case wire::Op::kSet: {
        if (request.fields.size() != 2) break;
        const std::string& key = request.fields[0];
        const std::string& value = request.fields[1];
        const auto old = values.find(key);
        const size_t bytes = stored_bytes + key.size() + value.size() -
                             (old == values.end() ? 0 : key.size() + old->second.size());
        if (old == values.end() && values.size() >= limits.max_keys) {
          answer(c, wire::Status::kError,
                 {"the store is full: it holds " + std::to_string(values.size()) +
                  " keys, its limit"});
          return;
        }
        if (bytes > limits.max_stored_bytes) {
          answer(c, wire::Status::kError,
                 {"the store is full: it would hold " + std::to_string(bytes) +
                  " bytes of keys and values, over its limit of " +
                  std::to_string(limits.max_stored_bytes)});
          return;
        }
        values[key] = value;
        stored_bytes = bytes;
        changed = true;
        answer(c, wire::Status::kOk, {});
        return;
      }
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
      strangers.release(c.host);
      c.in.erase(0, wire::kHelloBytes);
    }
    for (;;) {
      c.held_back = c.out.size() >= limits.max_unsent_bytes;
      if (c.waiting || c.closing || c.held_back) return;
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
      // A rank's, no more than one request of the largest size.
      const size_t wanted = c.trusted ? kMaxUnreadBytes : wire::kHelloBytes;
      const size_t room = std::min(sizeof buffer, wanted - std::min(wanted, c.in.size()));
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
      const bool accepting = now >= accept_paused_until;
      if (!accepting) next = std::min(next, accept_paused_until);
      std::vector<pollfd> fds = {{wake_read, POLLIN, 0}, {accepting ? listen_fd : -1, POLLIN, 0}};
      std::vector<Connection*> polled;
      for (Connection& c : connections) {
        // A connection with answers it has not read, or a whole request not yet handled, is
        // not read from: what it can make the store hold is bounded.
        const bool reading = !c.closing && c.out.size() < limits.max_unsent_bytes &&
                             c.in.size() < (c.trusted ? kMaxUnreadBytes : wire::kHelloBytes);
        short events = reading ? POLLIN : 0;
        if (!c.out.empty()) events |= POLLOUT;
        fds.push_back({c.fd, events, 0});
        polled.push_back(&c);
        if (!c.trusted) next = std::min(next, c.hello_deadline);
        if (c.held_back && c.out.size() < limits.max_unsent_bytes) next = now;
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
        if (fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) alive = receive(c);
        // Requests left over while the connection waited or had answers unsent are handled
        // now, whether or not more arrived.
        if (alive && !c.closing && !c.in.empty()) {
          try {
            consume(c, now);
          } catch (const std::exception& e) {  // an HMAC failure, or out of memory
            answer(c, wire::Status::kError, {e.what()});
            c.closing = true;
          }
          most_unsent = std::max(most_unsent.load(), c.out.size());
        }
        if (!alive) {
          c.closing = true;
          c.out.clear();
        }
      }
      for (Connection& c : connections) {
        if (!c.trusted && !c.closing && now >= c.hello_deadline) {
          refuse(c, "it did not prove this run's secret within " +
                        std::to_string(limits.hello_window.count()) + " ms");
        }
        if (c.waiting && (changed || now >= c.wait_deadline)) settle(c, now);
      }
      changed = false;
      for (auto it = connections.begin(); it != connections.end();) {
        const bool sent = transmit(*it);
        if (!sent || (it->closing && it->out.empty())) {
          it = forget(it);
        } else {
          ++it;
        }
      }
      if (fds[1].revents & POLLIN) accept_some(now);
    }
  }
};

StoreServer::StoreServer(const std::string& host, int port, std::string secret, StoreLimits limits)
    : impl_(std::make_unique<Impl>(limits)) {
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
    // A deep accept queue (the kernel caps it at net.core.somaxconn): when a flood fills it,
    // the kernel drops a rank's connection request and resends it only a second later.
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 4096) != 0) {
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

size_t StoreServer::max_strangers_held() const {
  return impl_->strangers.most_held();
}

size_t StoreServer::max_unsent_held() const {
  return impl_->most_unsent.load();
}

}  // namespace mfsdp::executor
