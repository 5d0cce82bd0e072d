#include "executor/launch/log_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "schema/error.h"

namespace mfsdp::launch {

LogFiles::~LogFiles() {
  for (const int fd : fds_) close(fd);
}

std::string LogFiles::path(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / ("rank-" + std::to_string(rank) + ".log")).string();
}

void LogFiles::open_all(const std::string& dir, int first_rank, int count) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    fail(ExitCode::kIo, "--log-dir " + dir + ": cannot create it (" + error.message() +
                            "); give a writable directory");
  }
  // The directory itself is not followed through a link either (whoever could replace the
  // link would choose where the logs go), and every file is opened relative to the opened
  // directory, so that the one checked is the one written into.
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
    fail(ExitCode::kIo, "--log-dir " + dir +
                            " is a symbolic link, and logs are not written through links; "
                            "give the directory it points to");
  }
  if (dir_fd < 0) {
    fail(ExitCode::kIo, "--log-dir " + dir + ": cannot open it (" + std::strerror(errno) +
                            "); give a writable directory");
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{dir_fd};
  for (int rank = first_rank; rank < first_rank + count; ++rank) {
    const std::string name = "rank-" + std::to_string(rank) + ".log";
    const std::string file = path(dir, rank);
    // Never through a link someone planted there: it would truncate whatever it points at.
    // Readable by this user only (less if the umask says so): a log holds what the model
    // and the data printed.
    const int fd =
        openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == ELOOP) {
      fail(ExitCode::kIo, "--log-dir " + dir + ": " + file +
                              " is a symbolic link, and logs are not written through links; "
                              "remove it or give another directory");
    }
    if (fd < 0) {
      fail(ExitCode::kIo, "--log-dir " + dir + ": cannot write " + file + " (" +
                              std::strerror(errno) + "); give a writable directory");
    }
    fds_.push_back(fd);
  }
}

}  // namespace mfsdp::launch
