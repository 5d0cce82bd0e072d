#include "planner/torchscript/zip_directory.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "schema/digest.h"
#include "schema/error.h"
#include "schema/file_descriptor.h"

namespace mfsdp::planner {
namespace {

constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint32_t kEntrySignature = 0x02014b50;
constexpr uint64_t kEndSize = 22, kLocatorSize = 20, kZip64EndSize = 56, kEntrySize = 46;
constexpr uint64_t kMaxComment = 0xffff;
// A TorchScript directory is a few hundred bytes per tensor; this bounds what a damaged
// size field can make the reader allocate.
constexpr uint64_t kMaxDirectoryBytes = uint64_t{1} << 30;

// Reads `n` bytes at `offset`; the caller has checked that they lie inside the file.
using ReadAt = std::function<std::string(uint64_t offset, uint64_t n)>;

uint64_t le(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(bytes[at + static_cast<size_t>(i)]);
  }
  return value;
}

class DirectoryReader {
 public:
  DirectoryReader(uint64_t size, ReadAt read, std::string path)
      : size_(size), read_(std::move(read)), path_(std::move(path)) {}

  ZipDirectory run() {
    if (size_ < kEndSize) damaged("too short to be a zip archive");
    const uint64_t tail_size = std::min(size_, kEndSize + kMaxComment);
    const uint64_t tail_at = size_ - tail_size;
    const std::string tail = read_(tail_at, tail_size);
    const uint64_t end_at = tail_at + find_end(tail);
    const std::string end = tail.substr(end_at - tail_at, kEndSize);
    uint64_t entries = le(end, 10, 2), directory_size = le(end, 12, 4),
             directory_at = le(end, 16, 4), directory_end_limit = end_at;
    if (end_at >= kLocatorSize) {
      const std::string locator = read_(end_at - kLocatorSize, kLocatorSize);
      if (le(locator, 0, 4) == kZip64LocatorSignature) {
        const uint64_t zip64_at = le(locator, 8, 8);
        if (zip64_at > end_at - kLocatorSize || end_at - kLocatorSize - zip64_at < kZip64EndSize) {
          damaged("its zip64 end record lies outside the file");
        }
        const std::string zip64 = read_(zip64_at, kZip64EndSize);
        if (le(zip64, 0, 4) != kZip64EndSignature) damaged("its zip64 end record is missing");
        entries = le(zip64, 32, 8);
        directory_size = le(zip64, 40, 8);
        directory_at = le(zip64, 48, 8);
        directory_end_limit = zip64_at;
      }
    }
    if (directory_at > directory_end_limit || directory_size > directory_end_limit - directory_at) {
      damaged("its central directory lies outside the file");
    }
    if (directory_size > kMaxDirectoryBytes) damaged("its central directory is over 1 GiB");
    if (entries > directory_size / kEntrySize) {
      damaged("its central directory is shorter than its " + std::to_string(entries) +
              " records need");
    }
    ZipDirectory directory;
    directory.file_size = size_;
    const std::string bytes = read_(directory_at, directory_size);
    directory.records = parse_entries(bytes, entries, directory_at);
    directory.digest = schema::sha256_hex(std::to_string(size_) + "\n" + bytes);
    return directory;
  }

 private:
  uint64_t size_;
  ReadAt read_;
  std::string path_;

  [[noreturn]] void damaged(const std::string& why) const {
    fail(ExitCode::kModel, path_ + ": not a TorchScript archive, or truncated (" + why +
                               "); save the model with torch.jit.script(model).save(path)");
  }

  // The last end-of-directory record whose comment runs exactly to the end of the file.
  uint64_t find_end(const std::string& tail) const {
    for (uint64_t at = tail.size() - kEndSize + 1; at-- > 0;) {
      if (le(tail, at, 4) == kEndSignature && le(tail, at + 20, 2) == tail.size() - at - kEndSize) {
        return at;
      }
    }
    damaged("no zip end-of-directory record");
  }

  std::vector<ZipRecord> parse_entries(const std::string& bytes, uint64_t entries,
                                       uint64_t directory_at) const {
    std::vector<ZipRecord> records;
    records.reserve(entries);
    size_t at = 0;
    for (uint64_t i = 0; i < entries; ++i) {
      if (bytes.size() - at < kEntrySize || le(bytes, at, 4) != kEntrySignature) {
        damaged("central directory record " + std::to_string(i) + " is damaged");
      }
      ZipRecord record;
      record.method = static_cast<uint16_t>(le(bytes, at + 10, 2));
      record.crc32 = static_cast<uint32_t>(le(bytes, at + 16, 4));
      record.stored = le(bytes, at + 20, 4);
      record.size = le(bytes, at + 24, 4);
      const uint64_t name_size = le(bytes, at + 28, 2), extra_size = le(bytes, at + 30, 2),
                     comment_size = le(bytes, at + 32, 2);
      record.header_offset = le(bytes, at + 42, 4);
      const uint64_t total = kEntrySize + name_size + extra_size + comment_size;
      if (bytes.size() - at < total) {
        damaged("central directory record " + std::to_string(i) + " runs past the directory");
      }
      record.name = bytes.substr(at + kEntrySize, name_size);
      read_zip64_extra(bytes.substr(at + kEntrySize + name_size, extra_size), record);
      if (record.header_offset > directory_at ||
          record.stored > directory_at - record.header_offset) {
        damaged("record '" + record.name + "' lies outside the file");
      }
      if (record.method == 0 && record.stored != record.size) {
        damaged("stored record '" + record.name + "' has two sizes");
      }
      records.push_back(std::move(record));
      at += total;
    }
    return records;
  }

  // Sizes and the offset that do not fit 32 bits are in the zip64 extra field, in this order,
  // each present only where the 32-bit field says 0xffffffff.
  void read_zip64_extra(const std::string& extra, ZipRecord& record) const {
    constexpr uint64_t kMissing = 0xffffffff;
    if (record.size != kMissing && record.stored != kMissing && record.header_offset != kMissing) {
      return;
    }
    for (size_t at = 0; extra.size() - at >= 4;) {
      const uint64_t id = le(extra, at, 2), size = le(extra, at + 2, 2);
      if (extra.size() - at - 4 < size) break;
      if (id == 1) {
        size_t field = at + 4;
        for (uint64_t* value : {&record.size, &record.stored, &record.header_offset}) {
          if (*value != kMissing) continue;
          if (field + 8 > at + 4 + size)
            damaged("record '" + record.name + "' lacks its zip64 sizes");
          *value = le(extra, field, 8);
          field += 8;
        }
        return;
      }
      at += 4 + size;
    }
    damaged("record '" + record.name + "' lacks its zip64 sizes");
  }
};

}  // namespace

ZipDirectory read_zip_directory(const std::string& path) {
  schema::FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat info {};
  if (!file.valid() || ::fstat(file.get(), &info) != 0) {
    fail(ExitCode::kIo, path + ": cannot read the model file: " + std::strerror(errno));
  }
  const int fd = file.get();
  auto read = [&](uint64_t offset, uint64_t n) {
    std::string bytes(n, '\0');
    for (uint64_t done = 0; done < n;) {
      const ssize_t got =
          ::pread(fd, bytes.data() + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        fail(ExitCode::kIo, path + ": cannot read the model file: " +
                                (got < 0 ? std::strerror(errno) : "it shrank while being read"));
      }
      done += static_cast<uint64_t>(got);
    }
    return bytes;
  };
  return DirectoryReader(static_cast<uint64_t>(info.st_size), read, path).run();
}

ZipDirectory parse_zip_directory(const unsigned char* data, uint64_t size,
                                 const std::string& path) {
  auto read = [&](uint64_t offset, uint64_t n) {
    return std::string(reinterpret_cast<const char*>(data) + offset, n);
  };
  return DirectoryReader(size, read, path).run();
}

}  // namespace mfsdp::planner
