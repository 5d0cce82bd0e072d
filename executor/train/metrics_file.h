#pragma once
// The --metrics file of `mfsdp run`: JSON lines that every rank appends to. No LibTorch.

#include <string>

#include <nlohmann/json.hpp>

namespace mfsdp::executor {

// Each rank appends whole lines with one write(2) on an O_APPEND file, so lines of different
// ranks never interleave (on a local filesystem).
class MetricsFile {
 public:
  // Opens `path` for appending, emptied first when `truncate`. Throws Error(kIo).
  MetricsFile(const std::string& path, bool truncate);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  // One line. Throws Error(kIo).
  void write(const nlohmann::json& record);

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace mfsdp::executor
