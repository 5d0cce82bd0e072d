// The run's rendezvous secret: made up by the launcher, or given by the user for launches the
// launcher does not make (several nodes, torchrun, srun, mpirun). See docs/launch.md#security.

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

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

std::string read_secret_file(const std::string& path) {
  const std::string source = "MFSDP_RDZV_SECRET_FILE=" + path;
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    fail(ExitCode::kUsage, source + ": " + std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode)) fail(ExitCode::kUsage, source + " is not a regular file");
  if ((info.st_mode & 077) != 0) {
    fail(ExitCode::kUsage,
         source + " may be read by other users; make it private with chmod 600 " + path);
  }
  std::ifstream in(path, std::ios::binary);
  std::string line;
  if (!in || !std::getline(in, line))
    fail(ExitCode::kUsage, source + " cannot be read or is empty");
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
