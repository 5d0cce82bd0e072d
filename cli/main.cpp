// The `mfsdp` binary. Every failure reaches the user as one line and a documented exit code.
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/plan_command.h"
#include "schema/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "mfsdp: compile a fully-sharded data-parallel schedule for a TorchScript model into a "
      "plan file, then train by it.",
      "mfsdp"};
  app.set_version_flag("--version", std::string("mfsdp ") + MFSDP_VERSION);
  app.require_subcommand(1);
  app.footer("Run 'mfsdp <command> --help' for a command's flags and examples. Docs: docs/.");
  mfsdp::cli::add_plan_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "mfsdp: error: " << e.what() << " (see --help)\n";
    return static_cast<int>(mfsdp::ExitCode::kUsage);
  } catch (const mfsdp::Error& e) {
    std::cerr << "mfsdp: error: " << e.what() << "\n";
    return e.exit_status();
  } catch (const std::exception& e) {
    std::cerr << "mfsdp: internal error: " << e.what() << " (please report this)\n";
    return static_cast<int>(mfsdp::ExitCode::kInternal);
  }
  return 0;
}
