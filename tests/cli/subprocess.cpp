#include "tests/cli/subprocess.h"

#include "executor/launch/process.h"
#include "schema/error.h"

namespace mfsdp::testing {

RunResult run_program(const std::string& program, const std::vector<std::string>& args,
                      const std::string& cwd) {
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<launch::ChildProcess> child;
  try {
    child.emplace_back(argv, launch::environment_with({}), cwd);
  } catch (const Error& e) {
    return RunResult{127, "", std::string(e.what()) + "\n"};
  }
  const launch::Finished finished = launch::finish_all(child).front();
  return RunResult{finished.status.signal != 0 ? -1 : finished.status.code, finished.out,
                   finished.err};
}

}  // namespace mfsdp::testing
