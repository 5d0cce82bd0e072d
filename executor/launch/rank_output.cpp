#include "executor/launch/rank_output.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace mfsdp::launch {
namespace {

int index(Output stream) {
  return stream == Output::kStdout ? 0 : 1;
}

// One write per line where the system allows, so concurrent writers never split it.
bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A worker may end a segment with '\r' instead of '\n': a status line (rank 0's live
// progress), redrawn in place until the next line. Only one can be on the terminal, so this
// is shared by all ranks' outputs (one launch per process).
bool status_shown = false;

constexpr const char* kClearLine = "\033[K";

std::string without_clear(std::string text) {
  while (text.rfind(kClearLine, 0) == 0) text.erase(0, std::strlen(kClearLine));
  return text;
}

}  // namespace

bool ErrorLines::is_error(const std::string& line) {
  return line.rfind("mfsdp: error: ", 0) == 0;
}

std::string ErrorLines::key(const std::string& line) {
  std::string key;
  for (size_t i = 0; i < line.size(); ++i) {
    const bool digit = line[i] >= '0' && line[i] <= '9';
    if (!digit) {
      key += line[i];
    } else if (i == 0 || line[i - 1] < '0' || line[i - 1] > '9') {
      key += '#';
    }
  }
  return key;
}

bool ErrorLines::seen_before(int rank, const std::string& line) {
  std::vector<int>& ranks = ranks_[key(line)];
  ranks.push_back(rank);
  return ranks.size() > 1;
}

std::vector<int> ErrorLines::ranks_of(const std::string& line) const {
  const auto it = ranks_.find(key(line));
  return it == ranks_.end() ? std::vector<int>() : it->second;
}

RankOutput::RankOutput(int rank, int stdout_fd, int stderr_fd, bool prefixed,
                       std::string destination, size_t recent_capacity, ErrorLines* errors)
    : rank_(rank),
      fds_{stdout_fd, stderr_fd},
      prefixed_(prefixed),
      destination_(std::move(destination)),
      recent_capacity_(recent_capacity),
      errors_(errors) {}

void RankOutput::add(Output stream, const std::string& bytes) {
  std::string& partial = partial_[index(stream)];
  partial += bytes;
  size_t start = 0;
  while (true) {
    const size_t end = partial.find_first_of("\r\n", start);
    if (end == std::string::npos) {
      if (partial.size() - start < kMaxLine) break;
      emit(stream, partial.substr(start, kMaxLine));
      start += kMaxLine;
      continue;
    }
    if (partial[end] == '\r') {
      show_status(stream, partial.substr(start, end - start));
    } else {
      emit(stream, partial.substr(start, end - start));
    }
    start = end + 1;
  }
  partial.erase(0, start);
}

void RankOutput::finish(Output stream) {
  std::string& partial = partial_[index(stream)];
  if (!partial.empty()) emit(stream, partial);
  partial.clear();
}

void RankOutput::show_status(Output stream, const std::string& segment) {
  const std::string text = without_clear(segment);
  if (text.empty() || !prefixed_) return;  // log files keep whole lines only
  status_shown = true;
  write_all(fds_[index(stream)],
            "\r" + std::string(kClearLine) + "[rank " + std::to_string(rank_) + "] " + text);
}

void RankOutput::emit(Output stream, const std::string& segment) {
  const std::string line = without_clear(segment);
  recent_.push_back(line);
  while (recent_.size() > recent_capacity_) recent_.pop_front();
  if (prefixed_ && errors_ && ErrorLines::is_error(line) && errors_->seen_before(rank_, line)) {
    return;
  }
  const std::string clear =
      status_shown && prefixed_ ? "\r" + std::string(kClearLine) : std::string();
  if (prefixed_) status_shown = false;
  const std::string text =
      clear + (prefixed_ ? "[rank " + std::to_string(rank_) + "] " : std::string()) + line + "\n";
  if (write_all(fds_[index(stream)], text) || write_failed_) return;
  write_failed_ = true;
  // A closed stdout (mfsdp run | head) is not worth a warning: the reader is gone on purpose.
  if (errno == EPIPE) return;
  const std::string warning = "mfsdp run: cannot write the output of rank " +
                              std::to_string(rank_) + " to " + destination_ + ": " +
                              std::strerror(errno) + "; the rest of it is lost\n";
  write_all(STDERR_FILENO, warning);
}

}  // namespace mfsdp::launch
