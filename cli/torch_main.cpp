// `mfsdp-torch`: the commands of `mfsdp` that load a TorchScript model. Users run `mfsdp`,
// which execs this binary for them; its command line is the same.
#include <CLI/CLI.hpp>

#include "cli/command_line.h"
#include "cli/export_command.h"
#include "cli/plan_command.h"
#include "cli/probe_command.h"
#include "cli/reshard_command.h"
#include "cli/run_command.h"
#include "cli/validate_command.h"
#include "cli/version.h"
#include "planner/torchscript/model_check.h"

int main(int argc, char** argv) {
  CLI::App app;
  mfsdp::cli::describe_app(app, mfsdp::cli::version_text());
  mfsdp::cli::add_plan_command(app);
  mfsdp::cli::add_run_command(app, argc, argv);
  mfsdp::cli::add_probe_command(app, argc, argv);
  mfsdp::cli::add_validate_command(app, mfsdp::planner::check_plan_against_model);
  mfsdp::cli::add_export_command(app);
  mfsdp::cli::add_reshard_command(app);
  return mfsdp::cli::run_app(app, argc, argv);
}
