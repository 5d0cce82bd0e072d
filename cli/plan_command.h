#pragma once

#include <CLI/CLI.hpp>

namespace mfsdp::cli {

// Adds `mfsdp plan` to `app`; its callback runs the planner and writes the plan.
void add_plan_command(CLI::App& app);

}  // namespace mfsdp::cli
