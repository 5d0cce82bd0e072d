#include "schema/plan_loader.h"

#include <utility>

#include "schema/error.h"
#include "schema/plan_check.h"
#include "schema/plan_json.h"

namespace mfsdp::schema {

PlanFileReport inspect_plan_file(const std::string& path, PlanCheck check) {
  ParseResult parsed = read_plan_file(path);
  PlanFileReport report;
  report.parsed = parsed.problems.empty();
  report.plan = std::move(parsed.plan);
  if (!report.parsed) {
    report.problems = std::move(parsed.problems);
  } else if (check == PlanCheck::kRules) {
    report.problems = check_plan(report.plan);
  }
  return report;
}

Plan load_plan_file(const std::string& path, PlanCheck check, const std::string& hint) {
  PlanFileReport report = inspect_plan_file(path, check);
  if (!report.problems.empty()) {
    const size_t more = report.problems.size() - 1;
    fail(ExitCode::kUsage, path + ": not a valid plan (" + report.problems.front().str() +
                               (more ? "; and " + std::to_string(more) + " more" : "") + "); " +
                               (hint.empty() ? "run mfsdp validate " + path : hint));
  }
  return std::move(report.plan);
}

}  // namespace mfsdp::schema
