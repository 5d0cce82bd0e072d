// The run's rendezvous secret: made up by the launcher, or given by the user for launches the
// launcher does not make (several nodes, torchrun, srun, mpirun). See docs/launch.md#security.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "executor/comm/launch_env.h"
#include "executor/comm/store_wire.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

const char kHowTo[] = "e.g. export MFSDP_RDZV_SECRET=$(openssl rand -hex 32)";

std::string checked(std::string secret, const std::string& source) {
  if (secret.size() < kMinSecretBytes) {
    fail(ExitCode::kUsage, source + " is " + std::to_string(secret.size()) +
                               " bytes; a rendezvous secret needs at least " +
                               std::to_string(kMinSecretBytes) + " random ones, " + kHowTo);
  }
  return secret;
}

// Opened without following a symbolic link as its last component, then checked on the open
// descriptor (so what is checked is what is read): a regular file of this user that no one
// else may read.
std::string read_secret_file(const std::string& path) {
  const std::string source = "MFSDP_RDZV_SECRET_FILE=" + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) {
      fail(ExitCode::kUsage, source +
                                 " is a symbolic link; point MFSDP_RDZV_SECRET_FILE at the "
                                 "file itself");
    }
    fail(ExitCode::kUsage, source + ": " + std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) fail(ExitCode::kUsage, source + ": " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) fail(ExitCode::kUsage, source + " is not a regular file");
  if (info.st_uid != ::geteuid()) {
    fail(ExitCode::kUsage, source + " belongs to user " + std::to_string(info.st_uid) +
                               ", not to this user (" + std::to_string(::geteuid()) +
                               "); use a secret file of your own");
  }
  if ((info.st_mode & 077) != 0) {
    fail(ExitCode::kUsage,
         source + " may be read by other users; make it private with chmod 600 " + path);
  }
  std::string content;
  char buffer[4096];
  while (content.size() < 65536) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(ExitCode::kUsage, source + " cannot be read: " + std::strerror(errno));
    if (n == 0) break;
    content.append(buffer, static_cast<size_t>(n));
  }
  std::string line = content.substr(0, content.find('\n'));
  if (line.empty()) fail(ExitCode::kUsage, source + " cannot be read or is empty");
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
    line.pop_back();
  }
  return checked(line, "the secret in " + path);
}

}  // namespace

std::string new_rendezvous_secret() {
  static const char kHex[] = "0123456789abcdef";
  std::string secret;
  for (uint8_t byte : store_wire::random_nonce()) {
    secret.push_back(kHex[byte >> 4]);
    secret.push_back(kHex[byte & 15]);
  }
  return secret;
}

std::optional<std::string> rendezvous_secret_from_environment() {
  const char* value = std::getenv("MFSDP_RDZV_SECRET");
  const char* file = std::getenv("MFSDP_RDZV_SECRET_FILE");
  const bool has_value = value != nullptr && *value != '\0';
  const bool has_file = file != nullptr && *file != '\0';
  if (has_value && has_file) {
    fail(ExitCode::kUsage, "both MFSDP_RDZV_SECRET and MFSDP_RDZV_SECRET_FILE are set; unset one");
  }
  if (has_value) return checked(value, "MFSDP_RDZV_SECRET");
  if (has_file) return read_secret_file(file);
  return std::nullopt;
}

}  // namespace mfsdp::executor
