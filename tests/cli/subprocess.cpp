#include "tests/cli/subprocess.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

#include "executor/launch/process.h"
#include "schema/error.h"

namespace mfsdp::testing {

RunResult run_program(const std::string& program, const std::vector<std::string>& args,
                      const std::string& cwd) {
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<launch::ChildProcess> child;
  try {
    child.emplace_back(argv, launch::environment_with({}), cwd);
  } catch (const Error& e) {
    return RunResult{127, "", std::string(e.what()) + "\n"};
  }
  const launch::Finished finished = launch::finish_all(child).front();
  return RunResult{finished.status.signal != 0 ? -1 : finished.status.code, finished.out,
                   finished.err};
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("free_port: cannot open a socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), size) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0;
  ::close(fd);
  if (!bound) throw std::runtime_error("free_port: cannot bind a port on 127.0.0.1");
  return ntohs(address.sin_port);
}

}  // namespace mfsdp::testing
