#pragma once
// The plan search behind `mfsdp plan --optimize` and `--sweep` (docs/predict.md#choosing-a-plan):
// plans of one model that differ in their units (the user's; every block plus the model, with
// no, half or every block checkpointed; adjacent blocks merged in twos or fours plus the
// model; every module of a repeated block class plus the model; the model alone) and their
// policy (prefetch 0, 1 or 2; one stream or two; resharding every unit after forward, keeping
// the last few units of forward gathered for backward, or keeping them all). With a trace, each set
// of units is traced once and every plan is predicted on a profile; without one, plans are weighed
// by memory and collective count alone.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/sharded_model.h"
#include "planner/trace_input.h"
#include "predict/plan_prediction.h"
#include "schema/plan.h"
#include "search/unit_choices.h"

namespace mfsdp::search {

struct SearchInput {
  planner::ShardedModel* model = nullptr;
  std::string model_path;
  schema::Mesh mesh;
  schema::Policy policy;  // the user's: the first policy tried, and what the others keep
  UnitChoice yours;       // the user's units; search_plans adds the others
  std::vector<planner::TraceInput> trace_inputs;  // none: by memory alone (no profile then)
  int trace_repeats = planner::kAutoTimedSteps;
  // kMeta: each choice's trace runs on meta tensors (no times): plans are predicted from their
  // work at the profile's compute rates, or without a profile that has them, weighed by memory,
  // their traced activations included, and collectives.
  planner::TraceDevice trace_device = planner::TraceDevice::kCpu;
  planner::Attention attention = planner::Attention::kAsTraced;  // kFused: meta only
  std::optional<predict::Profile> profile;                       // with a trace
  predict::PredictRequest predict;  // microbatches, microbatch size, optimizer, compute scale
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
  size_t choice = 0;  // which UnitChoice
  schema::Policy policy;
  std::vector<std::optional<bool>> reshard_after_forward;  // per unit, as planned
  schema::Plan plan;
  double step_ms = 0;  // predicted; 0 without a trace
  double exposed_ms = 0;
  int64_t memory_bytes = 0;    // a rank's whole memory (activations only with a trace)
  int64_t collectives = 0;     // all-gathers and reduce-scatters per microbatch
  int kept = 0, gathered = 0;  // units kept gathered from forward to backward, of those called
  bool fits = true;
  bool pareto = false;  // no other candidate is both faster (fewer collectives) and smaller
  // "blocks + model, prefetch 1, keep 2 of 5, 2 streams"
  std::string label() const;
};

struct SearchResult {
  bool predicted = true;              // by a trace and a profile; false: by memory alone
  bool activations = false;           // memory counts traced activations (always when predicted)
  std::vector<Candidate> candidates;  // in the order tried: the user's plan first
  int chosen = -1;                    // the best that fits (-1: none fits)
  int yours = 0;                      // the user's units and policy
  int fsdp2_default = -1;             // blocks + model, prefetch 1, reshard, 2 streams
  struct WorldRow {
    int64_t world_size = 0;
    double step_ms = 0;
    int64_t memory_bytes = 0;
  };
  std::vector<WorldRow> worlds;  // --sweep-world
};

// Makes the unit choices, traces each once (with a trace input) and plans every
// combination. With a trace the fastest predicted plan that fits the budget wins, and among
// plans within 1 % of it the one that holds the least memory, then the one tried first;
// without, the plan of two or more units with the fewest collectives that fits (the model
// alone only when no other fits), then the least memory, then the
// first. Deterministic for the same traces. Throws what planning, tracing and predicting
// throw.
SearchResult search_plans(const SearchInput& input);

}  // namespace mfsdp::search
