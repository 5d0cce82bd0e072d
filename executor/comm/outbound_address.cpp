#include "executor/comm/outbound_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "schema/error.h"

namespace mfsdp::executor {

std::string outbound_address(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    fail(ExitCode::kRuntime,
         "cannot resolve MASTER_ADDR '" + host + "': " + std::string(gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, &freeaddrinfo);
  std::string last_error = "no address";
  for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    // Connecting a UDP socket sends nothing; it only asks the kernel for the route.
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    const bool routed = connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    if (!routed) last_error = std::strerror(errno);
    close(fd);
    if (!routed) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* ip =
        local.ss_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
    if (inet_ntop(local.ss_family, ip, text, sizeof text) != nullptr) return text;
    last_error = std::strerror(errno);
  }
  fail(ExitCode::kRuntime, "no network route from this host to MASTER_ADDR '" + host + "': " +
                               last_error + "; set GLOO_SOCKET_IFNAME to choose an interface");
}

}  // namespace mfsdp::executor
