#pragma once
// The flags of `mfsdp plan` as typed (cli/plan_command.cpp checks them), and their --help.

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/predict_flags.h"

namespace mfsdp::cli {

// As typed: whole numbers and sizes stay text until run_plan checks them.
struct PlanFlags {
  std::string model;
  std::string output;
  // Whole numbers are read as typed and checked here: CLI11 would clamp a value beyond 64 bits.
  std::string world_size;
  std::string replicate;
  std::vector<std::string> unit_globs;
  std::vector<std::string> unit_types;
  std::vector<std::string> checkpoint_globs;
  std::vector<std::string> checkpoint_types;
  std::vector<std::string> keep_globs;
  bool auto_units = false;
  std::string scope_file;
  std::string param_dtype;
  std::string reduce_dtype;
  bool reshard_after_forward = false, no_reshard_after_forward = false;
  std::string prefetch;
  std::string forward_prefetch;
  std::string backward_prefetch;
  std::string resident_budget;
  bool unified_stream = false, no_unified_stream = false;
  std::string align_bytes;
  std::vector<std::string> trace_inputs;
  std::string trace_repeats;
  std::string trace_threads;
  std::string trace_device;
  bool fused_attention = false;
  std::string training_file;
  bool quiet = false;
  bool json_summary = false;
  // The search (search/plan_search.h).
  bool optimize = false, sweep = false;
  std::string sweep_worlds, memory_budget;
  PredictFlags prediction;
};

// Adds every flag of `mfsdp plan` to `cmd`, with the examples as its footer.
void add_plan_flags(CLI::App& cmd, PlanFlags& flags);

}  // namespace mfsdp::cli
