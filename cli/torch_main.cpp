// `mfsdp-torch`: the commands of `mfsdp` that load a TorchScript model. Users run `mfsdp`,
// which execs this binary for them; its command line is the same.
#include <CLI/CLI.hpp>

#include "cli/command_line.h"
#include "cli/plan_command.h"

int main(int argc, char** argv) {
  CLI::App app;
  mfsdp::cli::describe_app(app);
  mfsdp::cli::add_plan_command(app);
  return mfsdp::cli::run_app(app, argc, argv);
}
