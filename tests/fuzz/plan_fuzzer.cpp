// A plan file through what `mfsdp validate` and `mfsdp show` do with it: read it (JSON text,
// shape), check its rules, render show's three views, and write it back. A plan that validates
// must read back as itself: dump_plan, read again, dump again gives the same bytes.

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/plan_report.h"
#include "cli/validate_command.h"
#include "schema/error.h"
#include "schema/plan_json.h"
#include "tests/fuzz/harness.h"

namespace mfsdp::fuzz {
namespace {

void check_rewrite(InputFile& input, const schema::Plan& plan) {
  const std::string text = schema::dump_plan(plan);
  cli::CheckedPlan again;
  try {
    again = cli::read_checked_plan(input.write(text));
  } catch (const Error& error) {
    finding(std::string("a valid plan, as dump_plan writes it, is not readable: ") + error.what());
  }
  if (!again.problems.empty()) {
    finding("a valid plan, as dump_plan writes it, is invalid: " + again.problems.front().str());
  }
  if (schema::dump_plan(again.plan) != text) {
    finding("a valid plan read back from dump_plan's bytes dumps to other bytes");
  }
}

}  // namespace
}  // namespace mfsdp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mfsdp;
  static fuzz::InputFile input;
  fuzz::expect_only_errors([&] {
    const cli::CheckedPlan checked = cli::read_checked_plan(input.write(data, size));
    // show refuses a plan with problems, so its renderers only ever see valid plans.
    if (!checked.problems.empty()) return;
    const std::string file = "fuzz.plan.json";
    cli::render_plan_text(checked.plan, file);
    cli::plan_report_json(checked.plan, file)
        .dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    cli::render_plan_dot(checked.plan, file);
    fuzz::check_rewrite(input, checked.plan);
  });
  return 0;
}
