#pragma once
// What `mfsdp plan --optimize`, `--sweep` and `--sweep-world` print and write
// (docs/predict.md#choosing-a-plan): the search (search/plan_search.h) run, its table, its
// choice, and the refusal when no plan fits the budget.

#include <cstdint>
#include <optional>
#include <ostream>

#include "schema/plan.h"
#include "search/plan_search.h"

namespace mfsdp::cli {

using search::SearchInput;
using search::SearchResult;

// What `mfsdp plan` asked for: --optimize (write the chosen plan), --sweep (print the table).
struct SearchMode {
  bool optimize = false;
  bool sweep = false;
  bool print_choice = true;  // what --optimize chose, on `summary`
};

// Runs the search, prints what `mode` asks (the table on `table`, the choice on `summary`)
// and returns the plan to write: the chosen one, or with --sweep alone the user's. Exits 4
// (Error(kPlanning)) naming the smallest plan when none fits the budget.
schema::Plan choose_plan(const SearchInput& input, const SearchMode& mode, std::ostream& table,
                         std::ostream& summary);

// The table `--sweep` prints: every candidate by memory, the Pareto front marked.
void print_sweep(std::ostream& out, const SearchResult& result,
                 const std::optional<int64_t>& budget);
// The world-size table of --sweep-world.
void print_worlds(std::ostream& out, const SearchResult& result);
// The lines `--optimize` prints: what it chose and the predicted gain.
void print_choice(std::ostream& out, const SearchResult& result,
                  const std::optional<int64_t>& budget);

}  // namespace mfsdp::cli
