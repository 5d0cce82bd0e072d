#pragma once

#include <CLI/CLI.hpp>

namespace mfsdp::cli {

// Adds `mfsdp probe` to `app`: measures this machine's collectives and compute into a profile
// (predict/profile.h). Like `mfsdp run`, it starts its ranks (copies of this program with the
// same arguments) unless a launcher's environment says it is one of them.
void add_probe_command(CLI::App& app, int argc, char** argv);

}  // namespace mfsdp::cli
