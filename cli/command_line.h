#pragma once
// What both mfsdp binaries share: the top-level app and the single place where errors become
// one line on stderr and a documented exit code.

#include <string>

#include <CLI/CLI.hpp>

#include "schema/error.h"

namespace mfsdp::cli {

// The top-level `mfsdp` app with its description, footer and `--version`, which prints
// `version` (cli/version.h's version_text()).
void describe_app(CLI::App& app, const std::string& version);
// Parses and runs the chosen command; returns the process exit status.
int run_app(CLI::App& app, int argc, char** argv);

// Ends a command with `code` and no message, after it has printed its answer (e.g. `diff`
// when the plans differ, like diff(1)). run_app turns it into the exit status.
[[noreturn]] void exit_with(ExitCode code);

}  // namespace mfsdp::cli
