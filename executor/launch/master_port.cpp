#include "executor/launch/master_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "schema/error.h"

namespace mfsdp::launch {
namespace {

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

}  // namespace

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

}  // namespace mfsdp::launch
