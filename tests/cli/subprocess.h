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

// Runs `program` (a path) with `args` in this process's environment, in `cwd` unless it is
// empty, with stdin from /dev/null, and waits for it. A program that cannot be started exits
// 127 with the reason on `err`, as in a shell.
RunResult run_program(const std::string& program, const std::vector<std::string>& args,
                      const std::string& cwd = "");

// A TCP port on 127.0.0.1 that was free a moment ago (whoever binds it next checks again).
// Throws std::runtime_error when no socket can be bound.
int free_port();

}  // namespace mfsdp::testing
