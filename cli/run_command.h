#pragma once

#include <CLI/CLI.hpp>

namespace mfsdp::cli {

// Adds `mfsdp run` to `app`. Without a launcher's environment it starts the workers (copies
// of this program with the same arguments, see executor/launch/launcher.h); with one (a
// worker, or a rank started by torchrun, srun or mpirun) it trains as that rank.
void add_run_command(CLI::App& app, int argc, char** argv);

}  // namespace mfsdp::cli
