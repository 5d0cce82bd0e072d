#pragma once
// A data file read through a read-only memory map, so a large corpus costs no copy: the text,
// tokens and tensors sources read their --data file with it. No LibTorch.

#include <cstddef>
#include <string>

namespace mfsdp::executor {

// A read-only memory map of a whole file, or nothing for an empty one.
class MappedFile {
 public:
  // Throws Error(kIo) naming the file and --data when it cannot be opened or mapped (a
  // directory, a pipe).
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

  [[noreturn]] static void fail_io(const std::string& path, int error);

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace mfsdp::executor
