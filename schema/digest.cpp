#include "schema/digest.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <openssl/evp.h>

#include "schema/error.h"
#include "schema/file_descriptor.h"

namespace mfsdp::schema {
namespace {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) broken();
  }

  void update(const void* data, size_t size) {
    if (EVP_DigestUpdate(ctx_.get(), data, size) != 1) broken();
  }

  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), digest, &size) != 1) broken();
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string text;
    for (unsigned int i = 0; i < size; ++i) {
      text += kDigits[digest[i] >> 4];
      text += kDigits[digest[i] & 0xf];
    }
    return text;
  }

 private:
  [[noreturn]] static void broken() {
    fail(ExitCode::kInternal, "OpenSSL could not compute a SHA-256 digest");
  }

  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

}  // namespace

std::string sha256_hex(const std::string& bytes) {
  Sha256 sha;
  sha.update(bytes.data(), bytes.size());
  return sha.hex();
}

std::string sha256_file_hex(const std::string& path) {
  Sha256 sha;
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.valid()) fail(ExitCode::kUsage, path + ": cannot read: " + std::strerror(errno));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(file.get(), buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(ExitCode::kUsage, path + ": cannot read: " + std::strerror(errno));
    }
    sha.update(buffer, static_cast<size_t>(n));
  }
  return sha.hex();
}

}  // namespace mfsdp::schema
