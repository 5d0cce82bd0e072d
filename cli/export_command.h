#pragma once

#include <CLI/CLI.hpp>

namespace mfsdp::cli {

// Adds `mfsdp export` to `app`; its callback writes a checkpoint's trained model.
void add_export_command(CLI::App& app);

}  // namespace mfsdp::cli
