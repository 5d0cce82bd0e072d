#pragma once

#include <CLI/CLI.hpp>

namespace mfsdp::cli {

// Adds `mfsdp show` to `app`: a valid plan as a terminal summary, a JSON digest or a DOT graph.
void add_show_command(CLI::App& app);

}  // namespace mfsdp::cli
