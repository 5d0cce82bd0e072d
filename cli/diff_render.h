#pragma once
// How `mfsdp diff` prints a PlanDiff: text for a terminal or a CI log, markdown for a pull
// request comment, JSON for tools. The formats are documented in docs/cli.md#mfsdp-diff.

#include <string>

#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "schema/plan_diff.h"
#include "schema/plan_diff_threshold.h"

namespace mfsdp::cli {

enum class DiffFormat { kText, kJson, kMarkdown };

struct DiffReport {
  std::string old_path;
  std::string new_path;
  schema::PlanDiff diff;
  std::vector<schema::ThresholdResult> thresholds;  // --fail-on, in flag order
};

// Text of identical plans is empty (like diff(1)); markdown says so in one line; JSON is always
// an object. `color` adds ANSI colours to text.
std::string render_diff(const DiffReport& report, DiffFormat format, bool color);
// The JSON rendering as a document, for a caller that adds to it before printing
// (`mfsdp diff --profile` adds its `prediction`): render_diff's JSON is its dump(2) + "\n".
nlohmann::ordered_json diff_json(const DiffReport& report);

}  // namespace mfsdp::cli
