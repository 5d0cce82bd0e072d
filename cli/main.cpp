// The `mfsdp` binary. Commands that read only plan files run here without LibTorch, so they
// start fast; commands that load a model (plan, and later run/export) live in the
// `mfsdp-torch` binary installed next to this one, which this one execs.
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/command_line.h"
#include "cli/diff_command.h"
#include "cli/show_command.h"
#include "cli/validate_command.h"
#include "cli/version.h"
#include "schema/error.h"

namespace {

const char* const kTorchCommands[] = {"plan", "run", "probe", "export", "reshard"};

// `validate --model` loads the model; `validate` alone reads only the plan.
bool validates_against_model(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") return false;
    if (arg == "--model" || arg.rfind("--model=", 0) == 0) return true;
  }
  return false;
}

bool needs_torch(int argc, char** argv) {
  if (argc < 2) return false;
  for (const char* command : kTorchCommands) {
    if (std::string(argv[1]) == command) return true;
  }
  return std::string(argv[1]) == "validate" && validates_against_model(argc, argv);
}

std::string torch_binary() {
  if (const char* path = std::getenv("MFSDP_TORCH_BINARY")) return path;
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "mfsdp-torch";
  self[n] = '\0';
  std::string dir(self);
  return dir.substr(0, dir.rfind('/') + 1) + "mfsdp-torch";
}

[[noreturn]] void exec_torch_binary(int argc, char** argv) {
  const std::string path = torch_binary();
  std::vector<char*> args(argv, argv + argc);
  args[0] = const_cast<char*>(path.c_str());
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  std::cerr << "mfsdp: internal error: cannot run " << path << " (" << strerror(errno)
            << "); mfsdp-torch must be installed next to mfsdp\n";
  std::exit(static_cast<int>(mfsdp::ExitCode::kInternal));
}

}  // namespace

int main(int argc, char** argv) {
  if (needs_torch(argc, argv)) exec_torch_binary(argc, argv);
  CLI::App app;
  mfsdp::cli::describe_app(app, mfsdp::cli::version_text());
  // Listed here for --help; parsing never reaches them (they were exec'd above).
  app.add_subcommand("plan", "Compile a TorchScript model and a sharding scope into a plan file");
  app.add_subcommand("run", "Train a model by a plan: start the ranks, or be one");
  app.add_subcommand(
      "probe", "Measure this machine's collectives and compute into a profile for predictions");
  app.add_subcommand("export", "Write a checkpoint's trained model as a TorchScript file");
  app.add_subcommand(
      "reshard", "Lay a checkpoint out for another plan of its model (world size, mesh, units)");
  mfsdp::cli::add_validate_command(app);
  mfsdp::cli::add_show_command(app);
  mfsdp::cli::add_diff_command(app);
  return mfsdp::cli::run_app(app, argc, argv);
}
