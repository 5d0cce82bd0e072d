#include "executor/comm/store_connection.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "executor/comm/store_wire.h"

namespace mfsdp::executor {

StoreConnection::StoreConnection(std::string peer, std::string gone_hint)
    : peer_(std::move(peer)), gone_hint_(std::move(gone_hint)) {}

StoreConnection::~StoreConnection() {
  close();
}

void StoreConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void StoreConnection::connect(const std::string& host, int port) {
  close();
  const store_wire::Addresses addresses = store_wire::resolve(host, port, false);
  std::string last_error = "no address";
  for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    const int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    if (::connect(s, a->ai_addr, a->ai_addrlen) == 0) {
      fd_ = s;
      return;
    }
    last_error = std::strerror(errno);
    ::close(s);
  }
  throw StoreHangup(last_error);
}

void StoreConnection::wait_for(short events, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) throw StoreError(peer_ + " did not answer " + what + " in time");
    pollfd p{fd_, events, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (n > 0) return;
    if (n < 0 && errno != EINTR) {
      throw StoreError("waiting on " + peer_ + " failed: " + std::strerror(errno));
    }
  }
}

void StoreConnection::send_all(const std::string& bytes, Clock::time_point deadline,
                               const std::string& what) {
  if (fd_ < 0) throw StoreError("the connection to " + peer_ + " is closed");
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_for(POLLOUT, deadline, what);
    } else if (n < 0 && errno != EINTR) {
      throw StoreHangup("lost " + peer_ + " (" + std::strerror(errno) + "); " + gone_hint_);
    }
  }
}

std::string StoreConnection::receive_exactly(size_t count, Clock::time_point deadline,
                                             const std::string& what) {
  if (fd_ < 0) throw StoreError("the connection to " + peer_ + " is closed");
  std::string bytes(count, '\0');
  size_t got = 0;
  while (got < count) {
    const ssize_t n = recv(fd_, bytes.data() + got, count - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0) {
      throw StoreHangup(peer_ + " closed the connection; " + gone_hint_);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_for(POLLIN, deadline, what);
    } else if (errno != EINTR) {
      throw StoreHangup("lost " + peer_ + " (" + std::strerror(errno) + ")");
    }
  }
  return bytes;
}

}  // namespace mfsdp::executor
