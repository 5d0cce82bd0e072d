#include "executor/train/metrics_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "schema/error.h"

namespace mfsdp::executor {

MetricsFile::MetricsFile(const std::string& path, bool truncate) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | (truncate ? O_TRUNC : 0), 0644);
  if (fd_ < 0) {
    fail(ExitCode::kIo, "cannot open --metrics file " + path + " (" + std::strerror(errno) +
                            "); check that its directory exists and is writable");
  }
  path_ = path;
}

MetricsFile::~MetricsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    fail(ExitCode::kIo, "cannot write --metrics file " + path_ + " (" + std::strerror(errno) + ")");
  }
}

}  // namespace mfsdp::executor
