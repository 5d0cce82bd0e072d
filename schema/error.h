#pragma once
// The one error type of the project: a message that names the input, what is wrong and the
// fix, plus the process exit code the CLI returns for it (documented in docs/cli.md).

#include <stdexcept>
#include <string>

namespace mfsdp {

enum class ExitCode : int {
  kOk = 0,
  kFindings = 1,   // `validate`: plan invalid; `diff`: plans differ.
  kUsage = 2,      // bad flags or arguments; unusable input file (missing, not JSON, ...).
  kModel = 3,      // the model file cannot be loaded as a TorchScript module with forward.
  kPlanning = 4,   // the scope cannot be honoured: selector, nesting, ownership, budget rules.
  kIo = 5,         // a file could not be written, or an existing data file not read.
  kRuntime = 6,    // training/executor failures (rendezvous, collectives, checkpoints).
  kInternal = 70,  // a bug in mfsdp; please report it.
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ExitCode code() const { return code_; }
  int exit_status() const { return static_cast<int>(code_); }

 private:
  ExitCode code_;
};

[[noreturn]] inline void fail(ExitCode code, const std::string& message) {
  throw Error(code, message);
}

}  // namespace mfsdp
