#pragma once
// Runs a program the way a user would (no shell), capturing its output and exit status.

#include <string>
#include <vector>

namespace mfsdp::testing {

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string out;
  std::string err;
};

RunResult run_program(const std::string& program, const std::vector<std::string>& args,
                      const std::string& cwd = "");

}  // namespace mfsdp::testing
