// measure_activations: the traced step's activation memory (planner/trace_input.h) as the
// plan states it (docs/plan-format.md#activations): per unit, the bytes its forward left alive,
// and the peak of the step with the schedule point it follows.

#include <algorithm>
#include <string>
#include <vector>

#include "planner/passes.h"
#include "schema/error.h"

namespace mfsdp::planner {
namespace {

// A unit's forward call still open in the walk over the traced boundaries.
struct OpenCall {
  int unit = -1;
  int64_t live_at_entry = 0;
  int64_t nested = 0;  // what the units called inside it left alive
};

[[noreturn]] void malformed(const std::string& what) {
  fail(ExitCode::kInternal, "the traced memory is malformed: " + what + "; this is a bug in mfsdp");
}

}  // namespace

void measure_activations(PlanIR& ir) {
  if (!ir.traced_run) return;
  const TracedRun& run = *ir.traced_run;
  // A run built by hand (tests, other tracers) may carry orders without bytes.
  if (run.forward_bytes.empty() && run.backward_bytes.empty()) return;
  if (run.forward_bytes.size() != run.forward.size() ||
      run.backward_bytes.size() != run.backward.size()) {
    malformed("a boundary without its bytes");
  }
  schema::Activations a;
  a.microbatch = run.batch;
  a.output_bytes = run.output_bytes;
  a.loss = run.loss;

  // What each call kept: alive at its exit less alive at its entry, less what its nested
  // units' calls kept (theirs to report), summed over the unit's calls.
  std::vector<int64_t> saved(ir.units.size(), 0);
  std::vector<OpenCall> open;
  const auto consider = [&a](const TracedBytes& bytes, const std::string& where) {
    if (a.peak_at.empty() || bytes.peak > a.peak_bytes) {
      a.peak_bytes = bytes.peak;
      a.peak_at = where;
    }
  };
  for (size_t i = 0; i < run.forward.size(); ++i) {
    const TracedEvent& e = run.forward[i];
    const TracedBytes& bytes = run.forward_bytes[i];
    if (e.unit < 0 || static_cast<size_t>(e.unit) >= ir.units.size()) malformed("unknown unit");
    const std::string& name = ir.units[e.unit].name;
    consider(bytes, (e.enter ? "pre_forward " : "post_forward ") + name);
    if (e.enter) {
      open.push_back({e.unit, bytes.live, 0});
      continue;
    }
    if (open.empty() || open.back().unit != e.unit) malformed("an exit that does not nest");
    const int64_t kept = bytes.live - open.back().live_at_entry;
    saved[e.unit] += kept - open.back().nested;
    open.pop_back();
    if (!open.empty()) open.back().nested += kept;
  }
  consider(run.loss_bytes, "loss");
  for (size_t i = 0; i < run.backward.size(); ++i) {
    consider(run.backward_bytes[i], "pre_backward " + ir.units[run.backward[i]].name);
  }
  a.peak_bytes = std::max<int64_t>(a.peak_bytes, 0);
  for (int u : ir.forward_order) a.units.push_back({ir.units[u].name, saved[u]});
  ir.memory.activations = std::move(a);
}

}  // namespace mfsdp::planner
