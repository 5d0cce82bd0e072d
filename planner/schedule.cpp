// build_schedule: simulates one microbatch over the unit call trace and writes down, at every
// unit boundary, what the executor issues, waits on, frees and reduces.
#include <algorithm>

#include "planner/passes.h"
#include "schema/error.h"
#include "schema/plan_rules.h"

namespace mfsdp::planner {
namespace {

enum class State { kSharded, kGathering, kGathered };

class Simulation {
 public:
  Simulation(PlanIR& ir, int64_t forward_depth, int64_t backward_depth)
      : ir_(ir),
        forward_depth_(forward_depth),
        backward_depth_(backward_depth),
        state_(ir.units.size(), State::kSharded),
        started_(ir.units.size(), false) {}

  void run() {
    decide_kept_units();
    run_forward();
    std::fill(started_.begin(), started_.end(), false);
    run_backward();
  }

  int64_t peak() const { return peak_; }
  int64_t held_back() const { return held_back_; }
  const std::string& peak_at() const { return peak_at_; }

 private:
  // Resharding a unit right before backward gathers it again is waste: the first unit in
  // backward order that holds parameters is the last one forward finishes with.
  void decide_kept_units() {
    for (auto& unit : ir_.units) {
      unit.kept_after_forward = !unit.reshard_after_forward && unit.call_count > 0;
    }
    for (int u : ir_.backward_order) {
      if (holds_nothing(u)) continue;
      ir_.units[u].kept_after_forward = true;
      break;
    }
  }

  void run_forward() {
    const std::vector<int> position = positions(ir_.forward_order);
    for (const UnitCall& c : ir_.unit_trace) {
      UnitIR& unit = ir_.units[c.unit];
      if (c.enter) {
        auto& e = open_entry("forward", "pre_forward", c);
        started_[c.unit] = true;
        demand(e, c.unit);
        prefetch(e, ir_.forward_order, position[c.unit], forward_depth_);
        close_entry();
      } else {
        auto& e = open_entry("forward", "post_forward", c);
        close_entry();
        if (c.call == unit.call_count - 1 && !unit.kept_after_forward) reshard(e, c.unit);
      }
    }
  }

  void run_backward() {
    const std::vector<int> position = positions(ir_.backward_order);
    for (auto it = ir_.unit_trace.rbegin(); it != ir_.unit_trace.rend(); ++it) {
      const UnitCall& c = *it;
      if (!c.enter) {
        auto& e = open_entry("backward", "pre_backward", c);
        started_[c.unit] = true;
        demand(e, c.unit);
        prefetch(e, ir_.backward_order, position[c.unit], backward_depth_);
        close_entry();
      } else {
        auto& e = open_entry("backward", "post_backward", c);
        close_entry();
        if (c.call == 0) {
          reshard(e, c.unit);
          if (has_gradients(ir_.units[c.unit])) e.reduce_scatter.push_back(ir_.units[c.unit].name);
        }
      }
    }
    schema::ScheduleEntry end;
    end.phase = "backward";
    end.point = "end_of_backward";
    ir_.schedule.push_back(end);
    close_entry();
  }

  std::vector<int> positions(const std::vector<int>& order) const {
    std::vector<int> position(ir_.units.size(), -1);
    for (size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int>(i);
    return position;
  }

  schema::ScheduleEntry& open_entry(const char* phase, const char* point, const UnitCall& c) {
    schema::ScheduleEntry e;
    e.phase = phase;
    e.point = point;
    e.unit = ir_.units[c.unit].name;
    e.call = c.call;
    ir_.schedule.push_back(std::move(e));
    return ir_.schedule.back();
  }

  // Live bytes are recorded after the entry's all-gathers and before its reshards.
  void close_entry() {
    auto& e = ir_.schedule.back();
    e.unsharded_bytes = live_;
    if (live_ > peak_) {
      peak_ = live_;
      peak_at_ = schema::schedule_point_name(e);
    }
  }

  // A unit without parameters only marks a boundary: nothing to gather, free or reduce.
  bool holds_nothing(int u) const { return ir_.units[u].groups.empty(); }

  void demand(schema::ScheduleEntry& e, int u) {
    if (holds_nothing(u)) return;
    if (state_[u] == State::kSharded) issue(e, u);
    if (state_[u] == State::kGathering) {
      e.wait.push_back(ir_.units[u].name);
      state_[u] = State::kGathered;
    }
  }

  // Issues the next `depth` units after `position` that hold parameters; units that are
  // already gathering, or have run in this phase, still count towards the depth.
  void prefetch(schema::ScheduleEntry& e, const std::vector<int>& order, int position,
                int64_t depth) {
    const int64_t budget = ir_.policy.resident_budget_bytes;
    int64_t counted = 0;
    for (size_t i = position + 1; i < order.size() && counted < depth; ++i) {
      const int v = order[i];
      if (holds_nothing(v)) continue;
      ++counted;
      if (started_[v] || state_[v] != State::kSharded) continue;
      if (budget > 0 && ir_.units[v].unsharded_bytes > budget - live_) {
        ++held_back_;
        break;
      }
      issue(e, v);
    }
  }

  void issue(schema::ScheduleEntry& e, int u) {
    e.all_gather.push_back(ir_.units[u].name);
    state_[u] = State::kGathering;
    live_ = schema::add_sizes(
        live_, ir_.units[u].unsharded_bytes,
        "the live unsharded bytes at schedule[" + std::to_string(ir_.schedule.size() - 1) + "]");
  }

  void reshard(schema::ScheduleEntry& e, int u) {
    if (holds_nothing(u)) return;
    e.reshard.push_back(ir_.units[u].name);
    state_[u] = State::kSharded;
    live_ -= ir_.units[u].unsharded_bytes;
  }

  static bool has_gradients(const UnitIR& unit) {
    return std::any_of(unit.groups.begin(), unit.groups.end(), schema::has_gradient);
  }

  PlanIR& ir_;
  int64_t forward_depth_;
  int64_t backward_depth_;
  std::vector<State> state_;
  std::vector<bool> started_;  // in the current phase
  int64_t live_ = 0;
  int64_t held_back_ = 0;  // prefetches the resident budget postponed
  int64_t peak_ = -1;      // so that a schedule that never gathers peaks at its first point
  std::string peak_at_;
};

std::string bytes_text(int64_t bytes) {
  return std::to_string(bytes) + " bytes";
}

}  // namespace

void build_schedule(PlanIR& ir) {
  ir.schedule.clear();
  Simulation sim(ir, ir.policy.forward_prefetch, ir.policy.backward_prefetch);
  sim.run();
  ir.memory.peak_unsharded_bytes = sim.peak();
  ir.memory.peak_at = sim.peak_at();
  if (sim.held_back() > 0) {
    ir.diagnose("info", "prefetch.held_back",
                std::to_string(sim.held_back()) + " prefetch(es) waited for the resident budget " +
                    bytes_text(ir.policy.resident_budget_bytes) +
                    "; their all-gathers are issued later, with less overlap",
                "");
  }

  const int64_t budget = ir.policy.resident_budget_bytes;
  if (budget > 0 && sim.peak() > budget) {
    PlanIR probe = ir;
    probe.schedule.clear();
    Simulation minimal(probe, 0, 0);
    minimal.run();
    fail(ExitCode::kPlanning, "resident budget " + bytes_text(budget) +
                                  " is too small: the schedule needs " + bytes_text(sim.peak()) +
                                  " at " + sim.peak_at() + " (" + bytes_text(minimal.peak()) +
                                  " without any prefetch, at " + minimal.peak_at() +
                                  "); raise --resident-budget or split the largest units");
  }
}

}  // namespace mfsdp::planner
