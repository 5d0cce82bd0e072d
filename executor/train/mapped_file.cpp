#include "executor/train/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "schema/error.h"

namespace mfsdp::executor {

MappedFile::MappedFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_io(path, errno);
  struct stat info {};
  int error = 0;
  if (::fstat(fd, &info) != 0) {
    error = errno;
  } else if (S_ISDIR(info.st_mode)) {
    error = EISDIR;
  } else if (!S_ISREG(info.st_mode)) {
    error = EINVAL;  // mmap needs a regular file; a pipe has no size to map.
  }
  if (error != 0) {
    ::close(fd);
    fail_io(path, error);
  }
  size_ = static_cast<size_t>(info.st_size);
  if (size_ > 0) {
    void* data = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      fail_io(path, error);
    }
    data_ = static_cast<const unsigned char*>(data);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

void MappedFile::fail_io(const std::string& path, int error) {
  fail(ExitCode::kIo,
       "cannot read data file " + path + ": " + std::strerror(error) + "; check the --data path");
}

}  // namespace mfsdp::executor
