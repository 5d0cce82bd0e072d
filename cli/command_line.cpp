#include "cli/command_line.h"

#include <iostream>

#include "schema/error.h"

namespace mfsdp::cli {
namespace {

struct QuietExit {
  ExitCode code;
};

}  // namespace

void exit_with(ExitCode code) {
  throw QuietExit{code};
}

void describe_app(CLI::App& app, const std::string& version) {
  app.description(
      "mfsdp: compile a fully-sharded data-parallel schedule for a TorchScript model into a "
      "plan file, then train by it.");
  app.name("mfsdp");
  app.set_version_flag("--version", version,
                       "Print the version, the LibTorch it was built with and whether the CUDA "
                       "backend is in, then exit");
  app.require_subcommand(1);
  app.footer("Run 'mfsdp <command> --help' for a command's flags and examples. Docs: docs/.");
}

int run_app(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const QuietExit& e) {
    return static_cast<int>(e.code);
  } catch (const CLI::ParseError& e) {
    std::cerr << "mfsdp: error: " << e.what() << " (see --help)\n";
    return static_cast<int>(ExitCode::kUsage);
  } catch (const Error& e) {
    std::cerr << "mfsdp: error: " << e.what() << "\n";
    return e.exit_status();
  } catch (const std::exception& e) {
    std::cerr << "mfsdp: internal error: " << e.what() << " (please report this)\n";
    return static_cast<int>(ExitCode::kInternal);
  }
  return 0;
}

}  // namespace mfsdp::cli
