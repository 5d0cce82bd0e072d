#pragma once
// What every fuzz target shares: the input as a file the readers open by path, and the line
// between an expected answer to bad input and a finding.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace mfsdp::fuzz {

// read_plan_file and read_scope_file take a path; fuzzing them through it covers what the CLI
// runs (empty-file check, NUL handling, the JSON text reader) rather than a copy of it. The
// file lives in memory (memfd), so no input touches the disk.
class InputFile {
 public:
  InputFile();
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Replaces the file's content; returns a path that opens it.
  const std::string& write(const uint8_t* data, size_t size);
  const std::string& write(const std::string& text);

 private:
  int fd_ = -1;
  std::string path_;
};

// Runs `body`. An mfsdp::Error is the expected answer to bad input and ends it quietly, except
// one with ExitCode::kInternal, which mfsdp reserves for its own bugs. Any other exception is a
// finding.
void expect_only_errors(const std::function<void()>& body);
// As expect_only_errors, for readers whose every documented error is a usage error (exit 2):
// an mfsdp::Error with any other code is a finding too.
void expect_only_usage_errors(const std::function<void()>& body);

// Ends the run as a finding: prints what happened (a reason the stack alone does not give) and
// aborts, so libFuzzer keeps the input as a crash file.
[[noreturn]] void finding(const std::string& what);

}  // namespace mfsdp::fuzz
