#pragma once
// The log files of `mfsdp run --log-dir`: log_dir/rank-N.log per rank of this node, opened
// before any worker starts and closed with the launcher. No LibTorch.

#include <string>
#include <vector>

namespace mfsdp::launch {

class LogFiles {
 public:
  LogFiles() = default;
  ~LogFiles();
  LogFiles(const LogFiles&) = delete;
  LogFiles& operator=(const LogFiles&) = delete;

  // dir/rank-N.log, N the global rank.
  static std::string path(const std::string& dir, int rank);

  // Opens (truncating) log_dir/rank-N.log for each rank of this node.
  void open_all(const std::string& dir, int first_rank, int count);
  int fd(int index) const { return fds_[static_cast<size_t>(index)]; }

 private:
  std::vector<int> fds_;
};

}  // namespace mfsdp::launch
