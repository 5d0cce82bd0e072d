#include "tests/fuzz/harness.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <typeinfo>

#include "schema/error.h"

namespace mfsdp::fuzz {

InputFile::InputFile() : fd_(::memfd_create("mfsdp-fuzz-input", MFD_CLOEXEC)) {
  if (fd_ < 0) finding("memfd_create failed; the fuzz harness cannot run here");
  path_ = "/proc/self/fd/" + std::to_string(fd_);
}

InputFile::~InputFile() {
  ::close(fd_);
}

const std::string& InputFile::write(const uint8_t* data, size_t size) {
  if (::ftruncate(fd_, 0) != 0) finding("ftruncate of the input file failed");
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) finding("writing the input file failed");
    done += static_cast<size_t>(n);
  }
  return path_;
}

const std::string& InputFile::write(const std::string& text) {
  return write(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

void expect_only_errors(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& error) {
    if (error.code() == ExitCode::kInternal) {
      finding(std::string("mfsdp::Error with ExitCode::kInternal: ") + error.what());
    }
  } catch (const std::exception& error) {
    finding(std::string("an exception other than mfsdp::Error escaped: ") + typeid(error).name() +
            ": " + error.what());
  }
}

void expect_only_usage_errors(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& error) {
    if (error.code() != ExitCode::kUsage) {
      finding("mfsdp::Error with exit code " + std::to_string(static_cast<int>(error.code())) +
              " where only usage errors (2) are documented: " + error.what());
    }
  } catch (const std::exception& error) {
    finding(std::string("an exception other than mfsdp::Error escaped: ") + typeid(error).name() +
            ": " + error.what());
  }
}

void finding(const std::string& what) {
  std::fprintf(stderr, "\nmfsdp fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace mfsdp::fuzz
