#pragma once
// An owned POSIX file descriptor, so early returns and exceptions cannot leak it.

#include <unistd.h>

namespace mfsdp::schema {

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { close(); }

  bool valid() const { return fd_ >= 0; }
  int get() const { return fd_; }

  // Closes now; returns ::close's result because a failed close can mean lost writes.
  int close() {
    if (fd_ < 0) return 0;
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

}  // namespace mfsdp::schema
