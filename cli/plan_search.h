#pragma once
// `mfsdp plan --optimize` and `--sweep` (docs/predict.md#choosing-a-plan): plans of one model
// that differ in their units (the user's, every block plus the model, the model alone) and
// their policy (prefetch 0, 1 or 2; resharding after forward or not; one stream or two), each
// traced once per set of units, predicted on a profile and weighed by the memory a rank holds.

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/predict_report.h"
#include "planner/sharded_model.h"
#include "planner/trace_input.h"
#include "schema/plan.h"
#include "schema/profile.h"

namespace mfsdp::cli {

// One way to choose the units: module indices and their checkpoint flags.
struct UnitChoice {
  std::string name;  // "yours", "blocks + model", "model only"
  std::vector<int> modules;
  std::vector<bool> checkpoint;
};

struct SearchInput {
  planner::ShardedModel* model = nullptr;
  std::string model_path;
  schema::Mesh mesh;
  schema::Policy policy;          // the user's: the first policy tried, and what the others keep
  std::vector<UnitChoice> units;  // the user's first
  int blocks = -1;                // which of them is every block + the model (FSDP2's habit)
  std::vector<planner::TraceInput> trace_inputs;
  int trace_repeats = 3;
  schema::Profile profile;
  PredictRequest predict;  // microbatches, microbatch size, optimizer, compute scale
  std::optional<int64_t> memory_budget;
  std::optional<schema::Training> training;  // every plan's: its defaults feed the prediction
  // Called with each plan of the user's units; throws when mfsdp plan would refuse it.
  std::function<void(const schema::Plan&)> check_yours;
  // --sweep-world: the chosen plan (else the user's) again at each of these world sizes, with
  // the same per-rank microbatch.
  std::vector<int64_t> sweep_worlds;
};

struct Candidate {
  std::string units;  // UnitChoice::name
  schema::Policy policy;
  schema::Plan plan;
  double step_ms = 0;
  double exposed_ms = 0;
  int64_t memory_bytes = 0;
  bool fits = true;
  bool pareto = false;        // no other candidate is both faster and smaller
  std::string label() const;  // "blocks + model, prefetch 1, reshard, 2 streams"
};

struct SearchResult {
  std::vector<Candidate> candidates;  // in the order tried: the user's plan first
  int chosen = -1;                    // the fastest that fits (-1: none fits)
  int yours = 0;                      // the user's units and policy
  int fsdp2_default = -1;             // blocks + model, prefetch 1, reshard, 2 streams
  struct WorldRow {
    int64_t world_size = 0;
    double step_ms = 0;
    int64_t memory_bytes = 0;
  };
  std::vector<WorldRow> worlds;  // --sweep-world
};

// Traces each set of units once and plans every combination. Deterministic for the same
// traces: the fastest predicted plan that fits the budget wins, and among plans within 1 % of
// it the one that holds the least memory, then the one tried first. Throws what planning,
// tracing and predicting throw.
SearchResult search_plans(const SearchInput& input);

// The table `--sweep` prints: every candidate by memory, the Pareto front marked.
void print_sweep(std::ostream& out, const SearchResult& result,
                 const std::optional<int64_t>& budget);
// The world-size table of --sweep-world.
void print_worlds(std::ostream& out, const SearchResult& result);
// The lines `--optimize` prints: what it chose and the predicted gain.
void print_choice(std::ostream& out, const SearchResult& result,
                  const std::optional<int64_t>& budget);

}  // namespace mfsdp::cli
