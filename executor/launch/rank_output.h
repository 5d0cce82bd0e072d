#pragma once
// What one rank prints, as the launcher passes it on: cut into whole lines per stream (so two
// ranks never share a line), written to the launcher's stdout/stderr with a "[rank N] " prefix
// or to the rank's log file, and the last few lines kept for the failure report.

#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "executor/launch/process.h"

namespace mfsdp::launch {

// The "mfsdp: error: " lines ranks print. A bad flag or first batch fails every rank at
// once with the same line, up to numbers of its own (its rank, its batch's ids); the
// launcher passes each such error on once, and its failure report names the ranks that
// printed it.
class ErrorLines {
 public:
  static bool is_error(const std::string& line);
  // Records that `rank` printed error line `line`; true when another rank printed the same
  // line, numbers aside, first.
  bool seen_before(int rank, const std::string& line);
  // The ranks that printed `line`, numbers aside, in the order they did.
  std::vector<int> ranks_of(const std::string& line) const;

 private:
  static std::string key(const std::string& line);  // every run of digits as one '#'
  std::map<std::string, std::vector<int>> ranks_;
};

class RankOutput {
 public:
  // A line longer than this is passed on in pieces, so a rank that never ends a line cannot
  // make the launcher hold its output forever.
  static constexpr size_t kMaxLine = 64 * 1024;

  // Lines from the rank's stdout go to `stdout_fd` and from its stderr to `stderr_fd` (one
  // file for both is fine: whole lines are written at once). `prefixed`: add "[rank N] ".
  // `destination` names where they go, for the one warning when writing fails.
  // With `errors` (prefixed mode), an error line another rank already printed is kept in
  // recent() but not passed on again.
  RankOutput(int rank, int stdout_fd, int stderr_fd, bool prefixed, std::string destination,
             size_t recent_capacity = 10, ErrorLines* errors = nullptr);

  // Bytes as read from the rank's pipe; complete lines are passed on at once. A segment
  // ended by '\r' is a status line: drawn in place on the launcher's output (prefixed mode
  // only), cleared by the next line, and not kept in recent().
  void add(Output stream, const std::string& bytes);
  // End of file on that stream: a last line without a newline is passed on as a line.
  void finish(Output stream);

  // The last lines from both streams, oldest first, without prefix or newline.
  const std::deque<std::string>& recent() const { return recent_; }
  int rank() const { return rank_; }

 private:
  void emit(Output stream, const std::string& segment);
  void show_status(Output stream, const std::string& segment);

  int rank_;
  int fds_[2];
  bool prefixed_;
  std::string destination_;
  size_t recent_capacity_;
  std::string partial_[2];
  std::deque<std::string> recent_;
  bool write_failed_ = false;
  ErrorLines* errors_;
};

}  // namespace mfsdp::launch
