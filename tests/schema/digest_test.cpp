#include "schema/digest.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "schema/error.h"

namespace mfsdp::schema {
namespace {

// FIPS 180-2 test vectors.
TEST(Digest, HashesBytes) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Digest, FileDigestMatchesItsBytes) {
  std::string path = ::testing::TempDir() + "mfsdp_digest_XXXXXX";
  const int fd = ::mkstemp(path.data());
  ASSERT_GE(fd, 0);
  ::close(fd);
  // Larger than one read so the digest spans several updates.
  const std::string bytes(200000, 'x');
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_EQ(sha256_file_hex(path), sha256_hex(bytes));
  ::unlink(path.c_str());
}

TEST(Digest, MissingFileIsAUsageError) {
  const std::string path = ::testing::TempDir() + "mfsdp_digest_absent";
  try {
    sha256_file_hex(path);
    FAIL() << "expected mfsdp::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kUsage);
    EXPECT_EQ(std::string(error.what()), path + ": cannot read: No such file or directory");
  }
}

}  // namespace
}  // namespace mfsdp::schema
