#pragma once
// `mfsdp diff old.plan.json new.plan.json`: a semantic diff of two plans, with exit codes like
// diff(1) and `--fail-on` thresholds for CI.

#include <string>

#include <CLI/CLI.hpp>

#include "schema/plan_diff_threshold.h"

namespace mfsdp::cli {

// "memory-increase=5%", "comm-increase=64MiB", "units-changed", "diagnostics-added=warning".
// Throws Error(kUsage) naming the flag and the accepted forms.
schema::DiffThreshold parse_threshold(const std::string& text);

// Adds `mfsdp diff` to `app`.
void add_diff_command(CLI::App& app);

}  // namespace mfsdp::cli
