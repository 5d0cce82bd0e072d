#pragma once

#include <CLI/CLI.hpp>

namespace mfsdp::cli {

// Adds `mfsdp reshard` to `app`; its callback lays a checkpoint out for another plan.
void add_reshard_command(CLI::App& app);

}  // namespace mfsdp::cli
