#pragma once
// Following a plan's schedule literally. The executor reports what really happens at unit
// boundaries (pre-forward, post-forward, pre-backward); the cursor answers with the plan's
// collectives and state changes to perform, in plan order, so every rank issues the same
// collectives in the same order even when a data-dependent branch skips a unit on one rank.
// Entries the run skipped are still carried out (their all-gathers issued, their reshards
// done) and recorded as divergences. No LibTorch here: the executor follows the schedule with
// it, and whatever predicts a plan's step replays the schedule with the same semantics.

#include <optional>
#include <string>
#include <vector>

#include "schema/plan.h"

namespace mfsdp::schema {

// A schedule entry's point (schema's ScheduleEntry::point, parsed once). The executor reports
// the first three; post_backward entries are passed on the way to the next event, and
// end_of_backward is reached by finish().
enum class Point { kPreForward, kPostForward, kPreBackward, kPostBackward, kEndOfBackward };

// A ScheduleEntry's point by name; none for a name that is no point.
std::optional<Point> point_named(const std::string& name);
// The same for a validated plan (check_plan): Error(kInternal) for any other name.
Point parse_point(const std::string& point);

struct ScheduleAction {
  enum class Kind {
    kAllGather,  // issue the unit's all-gather on the all-gather stream
    kWait,       // compute waits for the unit's all-gather
    kReshard,    // free the unit's unsharded storage (its slot may be reused afterwards)
  };
  Kind kind;
  int unit;  // index into plan.units
  bool operator==(const ScheduleAction& o) const { return kind == o.kind && unit == o.unit; }
};

class ScheduleCursor {
 public:
  explicit ScheduleCursor(const Plan& plan);

  // Back to the first entry, for the next microbatch.
  void restart();
  // The actions for an event: those of every entry skipped since the last event, then the
  // entry's own. Throws Error(kRuntime) when the plan has no such entry ahead (a unit called
  // more often than planned, or out of phase).
  std::vector<ScheduleAction> on_event(Point point, int unit);
  // Whether the next entry belongs to the backward phase (forward is complete).
  bool in_backward() const;
  // The actions of every entry left, through end_of_backward.
  std::vector<ScheduleAction> finish();
  // The actions of the forward entries left (a forward without backward, for evaluation);
  // skipped units are not reported as divergences.
  std::vector<ScheduleAction> finish_forward();

  // Entries whose event never came, or came late: "pre_forward branch_b (call 0) did not run".
  const std::vector<std::string>& divergences() const { return divergences_; }

 private:
  void run_entry(size_t index, std::vector<ScheduleAction>& out);

  struct Entry {
    Point point = Point::kEndOfBackward;
    bool backward = false;  // its phase
    int unit = -1;          // -1 for end_of_backward
    std::vector<int> all_gather, wait, reshard;
  };

  const Plan& plan_;
  std::vector<Entry> entries_;  // plan.schedule with unit indices
  size_t next_ = 0;
  std::vector<std::string> divergences_;
  // Per unit and point (unit * kPoints + point): entries in the plan, events this microbatch.
  static constexpr size_t kPoints = 5;
  std::vector<int64_t> planned_, reached_;
};

// Reduce-scatters retire in the plan's order on every rank: a unit whose gradients are ready
// early waits for the units before it.
class ReduceScatterOrder {
 public:
  explicit ReduceScatterOrder(const Plan& plan);
  void restart();
  // Marks `unit`'s gradients ready; returns the units now to reduce, in order.
  std::vector<int> ready(int unit);
  // End of backward: every unit not yet reduced, in order (their gradients are zero if
  // they never arrived).
  std::vector<int> finish();

 private:
  std::vector<int> order_;
  std::vector<bool> is_ready_;
  size_t next_ = 0;
};

}  // namespace mfsdp::schema
