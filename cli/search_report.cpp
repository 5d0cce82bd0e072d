#include "cli/search_report.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/byte_size.h"
#include "schema/error.h"

namespace mfsdp::cli {
namespace {

using search::Candidate;

std::string ms_text(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f ms", ms);
  return text;
}

std::string percent_text(double now, double before) {
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f %%", before > 0 ? 100 * (now - before) / before : 0.0);
  return text;
}

}  // namespace

schema::Plan choose_plan(const SearchInput& in, const SearchMode& mode, std::ostream& table,
                         std::ostream& summary) {
  const SearchResult result = search_plans(in);
  if (mode.sweep) {
    print_sweep(table, result, in.memory_budget);
    print_worlds(table, result);
    table << std::flush;
  }
  if (!mode.optimize) {
    // The table marks the plan --optimize would choose; without it the file holds yours.
    if (mode.print_choice) {
      const Candidate& yours = result.candidates[result.yours];
      summary << "the plan file holds yours (" << yours.label() << ")"
              << (result.chosen >= 0 && result.chosen != result.yours
                      ? "; add --optimize to write the one marked chosen (" +
                            result.candidates[result.chosen].label() + ")"
                      : std::string())
              << "\n";
    }
    return result.candidates[result.yours].plan;
  }
  if (result.chosen < 0) {
    const auto smallest = std::min_element(
        result.candidates.begin(), result.candidates.end(),
        [](const Candidate& a, const Candidate& b) { return a.memory_bytes < b.memory_bytes; });
    fail(ExitCode::kPlanning,
         "no plan tried fits --memory-budget " + format_bytes(*in.memory_budget) +
             " per rank; the smallest (" + smallest->label() + ") needs " +
             format_bytes(smallest->memory_bytes) + "; raise the budget, add ranks, or " +
             (result.predicted ? "trace a smaller microbatch" : "shard over more ranks"));
  }
  if (mode.print_choice) print_choice(summary, result, in.memory_budget);
  return result.candidates[result.chosen].plan;
}

void print_sweep(std::ostream& out, const SearchResult& result,
                 const std::optional<int64_t>& budget) {
  std::vector<size_t> order(result.candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return result.candidates[a].memory_bytes < result.candidates[b].memory_bytes;
  });
  // The plan column is as wide as its longest label: labels name their choices in full.
  int width = 4;
  for (const Candidate& c : result.candidates) {
    width = std::max(width, static_cast<int>(c.label().size()));
  }
  char row[512];
  if (result.predicted) {
    std::snprintf(row, sizeof row, "  %-*s %12s %12s %12s  %s\n", width, "plan", "memory/rank",
                  "step", "exposed", "");
  } else {
    std::snprintf(row, sizeof row, "  %-*s %12s %12s  %s\n", width, "plan", "memory/rank",
                  "collectives", "");
  }
  out << "candidates (* on the Pareto front: none both "
      << (result.predicted ? "faster" : "with fewer collectives") << " and smaller"
      << (budget ? "; - over the budget of " + format_bytes(*budget) : std::string()) << ")\n";
  if (!result.predicted && result.activations) {
    out << "meta trace: memory with its activations, collectives per microbatch instead of a "
           "predicted step (a CPU trace and --profile predict it)\n";
  } else if (!result.predicted) {
    out << "no trace: memory without activations, collectives per microbatch instead of a "
           "predicted step (give --trace-input to predict it)\n";
  }
  out << row;
  for (size_t i : order) {
    const Candidate& c = result.candidates[i];
    std::string marks = c.pareto ? "*" : "";
    if (!c.fits) marks += "-";
    if (static_cast<int>(i) == result.chosen) marks += " chosen";
    if (static_cast<int>(i) == result.yours) marks += " yours";
    if (static_cast<int>(i) == result.fsdp2_default) marks += " fsdp2-like";
    if (result.predicted) {
      std::snprintf(row, sizeof row, "  %-*s %12s %12s %12s  %s\n", width, c.label().c_str(),
                    format_bytes(c.memory_bytes).c_str(), ms_text(c.step_ms).c_str(),
                    ms_text(c.exposed_ms).c_str(), marks.c_str());
    } else {
      std::snprintf(row, sizeof row, "  %-*s %12s %12lld  %s\n", width, c.label().c_str(),
                    format_bytes(c.memory_bytes).c_str(), static_cast<long long>(c.collectives),
                    marks.c_str());
    }
    out << row;
  }
}

void print_worlds(std::ostream& out, const SearchResult& result) {
  if (result.worlds.empty()) return;
  out << "world sizes (the " << (result.chosen >= 0 ? "chosen" : "your")
      << " plan, the same microbatch per rank)\n";
  char row[128];
  std::snprintf(row, sizeof row, "  %8s %14s %12s\n", "world", "memory/rank", "step");
  out << row;
  for (const auto& w : result.worlds) {
    std::snprintf(row, sizeof row, "  %8lld %14s %12s\n", static_cast<long long>(w.world_size),
                  format_bytes(w.memory_bytes).c_str(),
                  result.predicted ? ms_text(w.step_ms).c_str() : "-");
    out << row;
  }
}

void print_choice(std::ostream& out, const SearchResult& result,
                  const std::optional<int64_t>& budget) {
  const auto& all = result.candidates;
  if (result.chosen < 0) return;
  const Candidate& c = all[result.chosen];
  const Candidate& yours = all[result.yours];
  const std::string budget_text =
      budget ? " (budget " + format_bytes(*budget) + ")" : std::string();
  if (!result.predicted) {
    const auto figures = [](const Candidate& k) {
      return std::to_string(k.collectives) + " collectives per microbatch, " +
             format_bytes(k.memory_bytes) + " per rank";
    };
    out << "optimized by memory alone ("
        << (result.activations ? "meta trace, activations counted" : "no trace")
        << "): " << c.label() << ": " << figures(c) << budget_text << "\n";
    out << "  vs your plan (" << yours.label() << "): " << figures(yours)
        << (yours.fits ? "" : "; yours is over the budget") << "\n";
    if (!result.activations) {
      out << "  activations are not counted: leave room for them under the budget, or give "
             "--trace-input (and --profile) to count them and predict the step\n";
    }
    return;
  }
  out << "optimized: " << c.label() << ": predicted step " << ms_text(c.step_ms) << ", "
      << format_bytes(c.memory_bytes) << " per rank" << budget_text << "\n";
  out << "  vs your plan (" << yours.label() << "): " << ms_text(yours.step_ms) << ", "
      << percent_text(c.step_ms, yours.step_ms) << (yours.fits ? "" : "; yours is over the budget")
      << "\n";
  if (result.fsdp2_default >= 0) {
    const Candidate& d = all[result.fsdp2_default];
    out << "  vs an FSDP2-like default (" << d.label() << "): " << ms_text(d.step_ms) << ", "
        << percent_text(c.step_ms, d.step_ms) << "\n";
  }
}

}  // namespace mfsdp::cli
