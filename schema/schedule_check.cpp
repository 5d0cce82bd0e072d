// The schedule replayed the way the executor follows it: entry structure, bracket nesting of
// pre/post points, call numbering, and each unit's SHARDED → GATHERING → GATHERED → SHARDED
// state machine driven by the entries' actions.

#include "schema/check_context.h"
#include "schema/plan_rules.h"
#include "schema/schedule_cursor.h"

namespace mfsdp::schema::check {
namespace {

enum class State { kSharded, kGathering, kGathered };

using schema::Point;

const char* phase_of(Point point) {
  return point == Point::kPreForward || point == Point::kPostForward ? "forward" : "backward";
}

bool opens(Point point) {
  return point == Point::kPreForward || point == Point::kPreBackward;
}
bool closes(Point point) {
  return point == Point::kPostForward || point == Point::kPostBackward;
}

std::string call_name(const std::string& unit, int64_t call) {
  return quote(unit) + " call " + std::to_string(call);
}

bool has_any_gradient(const Unit& unit) {
  for (const Group& group : unit.groups) {
    if (has_gradient(group)) return true;
  }
  return false;
}

struct OpenCall {
  std::string unit;
  int64_t call = 0;
  size_t entry = 0;
};

class ScheduleReplay {
 public:
  explicit ScheduleReplay(Context& context) : context_(context) {
    for (const Unit& unit : context.plan.units) states_.emplace(unit.name, State::kSharded);
  }

  Lifetimes run() {
    const std::vector<ScheduleEntry>& schedule = context_.plan.schedule;
    for (size_t e = 0; e < schedule.size(); ++e) visit(e, schedule[e]);
    finish();
    return std::move(lifetimes_);
  }

 private:
  void visit(size_t e, const ScheduleEntry& entry) {
    const std::string path = at("schedule", e);
    const std::optional<Point> point = check_structure(e, path, entry);
    const Unit* unit = point ? check_entry_unit(path, entry, *point) : nullptr;

    for (size_t a = 0; a < entry.all_gather.size(); ++a) {
      all_gather(at(path + ".all_gather", a), entry.all_gather[a], e);
    }
    for (size_t a = 0; a < entry.wait.size(); ++a) {
      wait(at(path + ".wait", a), entry.wait[a], e);
    }
    check_live_bytes(path, entry);
    // Reshards run before reduce-scatters, so whether a unit is gathered for its
    // reduce-scatter is read before them.
    std::vector<bool> gathered;
    for (const std::string& name : entry.reduce_scatter) {
      const auto it = states_.find(name);
      gathered.push_back(it != states_.end() && it->second == State::kGathered);
    }

    if (point && unit != nullptr && opens(*point)) {
      // A unit that owns no parameters only marks a boundary; there is nothing to gather.
      if (!unit->groups.empty() && states_[unit->name] != State::kGathered) {
        context_.report(path, "runs " + quote(unit->name) +
                                  " before it is gathered; all-gather and wait for it by here");
      }
      open_.push_back({unit->name, entry.call, e});
    } else if (point && unit != nullptr && closes(*point)) {
      close_call(path, *point, unit->name, entry.call);
    } else if (point == Point::kEndOfBackward) {
      close_phase(Point::kPostBackward);
    }

    for (size_t a = 0; a < entry.reshard.size(); ++a) {
      reshard(at(path + ".reshard", a), entry.reshard[a], e);
    }
    for (size_t a = 0; a < entry.reduce_scatter.size(); ++a) {
      reduce_scatter(at(path + ".reduce_scatter", a), entry.reduce_scatter[a], e, entry, point,
                     gathered[a]);
    }
  }

  // Phase and point names, the phase order and the place of end_of_backward.
  std::optional<Point> check_structure(size_t e, const std::string& path,
                                       const ScheduleEntry& entry) {
    const bool phase_known = entry.phase == "forward" || entry.phase == "backward";
    if (!phase_known) {
      context_.report(path + ".phase",
                      "is " + quote(entry.phase) + ", expected 'forward' or 'backward'");
    }
    const std::optional<Point> point = point_named(entry.point);
    if (!point) {
      context_.report(path + ".point",
                      "is " + quote(entry.point) +
                          ", expected 'pre_forward', 'post_forward', 'pre_backward', "
                          "'post_backward' or 'end_of_backward'");
    } else if (phase_known && entry.phase != phase_of(*point)) {
      context_.report(path + ".phase", "is " + quote(entry.phase) + ", but " + quote(entry.point) +
                                           " belongs to the " + phase_of(*point) + " phase");
    }

    if (end_entry_) {
      context_.report(path, "comes after end_of_backward at " + at("schedule", *end_entry_) +
                                ", which must be the last entry");
    }
    const std::string phase = point ? phase_of(*point) : entry.phase;
    if (phase == "backward" && !backward_start_) {
      close_phase(Point::kPostForward);
      backward_start_ = e;
    } else if (phase == "forward" && backward_start_) {
      context_.report(path, "is a forward entry after the backward phase began at " +
                                at("schedule", *backward_start_));
    }
    if (point == Point::kEndOfBackward && !end_entry_) end_entry_ = e;
    return point;
  }

  // The entry's unit and call: they exist, and pre entries number the calls in forward order
  // and in reverse in backward. Returns the unit, or null for end_of_backward or a bad name.
  const Unit* check_entry_unit(const std::string& path, const ScheduleEntry& entry, Point point) {
    if (point == Point::kEndOfBackward) {
      if (entry.unit) {
        context_.report(path + ".unit",
                        "is " + quote(*entry.unit) + ", but end_of_backward names no unit");
      }
      if (entry.call != 0) {
        context_.report(path + ".call", "is " + std::to_string(entry.call) +
                                            ", but end_of_backward has no call; expected 0");
      }
      return nullptr;
    }
    if (!entry.unit) {
      context_.report(path + ".unit", "is null; only end_of_backward names no unit");
      return nullptr;
    }
    const Unit* unit = context_.unit(*entry.unit);
    if (unit == nullptr) {
      context_.report(path + ".unit", quote(*entry.unit) + " is not a unit");
      return nullptr;
    }
    if (opens(point)) {
      const bool forward = point == Point::kPreForward;
      const int64_t visit = (forward ? pre_forward_visits_ : pre_backward_visits_)[unit->name]++;
      if (visit >= unit->call_count) {
        context_.report(path, "is " + entry.point + " number " + std::to_string(visit + 1) +
                                  " of " + quote(unit->name) + ", whose call_count is " +
                                  std::to_string(unit->call_count));
        return unit;
      }
      const int64_t expected = forward ? visit : unit->call_count - 1 - visit;
      if (entry.call != expected) {
        context_.report(
            path + ".call",
            "is " + std::to_string(entry.call) + ", expected " + std::to_string(expected) +
                (forward ? ": forward runs the calls of " + quote(unit->name) + " in order from 0"
                         : ": backward visits the calls of " + quote(unit->name) +
                               " in reverse, ending with 0"));
      }
    }
    return unit;
  }

  bool known(const std::string& path, const std::string& name) {
    if (context_.unit(name) != nullptr) return true;
    context_.report(path, quote(name) + " is not a unit");
    return false;
  }

  void all_gather(const std::string& path, const std::string& name, size_t e) {
    if (!known(path, name)) return;
    const State state = states_[name];
    if (state != State::kSharded) {
      context_.report(path, "all-gathers " + quote(name) + ", which is already " +
                                (state == State::kGathering ? "being gathered" : "gathered") +
                                ": all-gather issued twice");
    } else {
      live_since_[name] = e;
    }
    set_state(name, State::kGathering);
  }

  void wait(const std::string& path, const std::string& name, size_t e) {
    if (!known(path, name)) return;
    const State state = states_[name];
    if (state == State::kSharded) {
      context_.report(path, "waits on an all-gather of " + quote(name) + " it never issued");
      live_since_[name] = e;
    } else if (state == State::kGathered) {
      context_.report(path, "waits on " + quote(name) + " again; its all-gather already finished");
    }
    set_state(name, State::kGathered);
  }

  void reshard(const std::string& path, const std::string& name, size_t e) {
    if (!known(path, name)) return;
    for (const OpenCall& open : open_) {
      if (open.unit == name) {
        context_.report(path, "reshards " + quote(name) + " while it still runs (its " +
                                  context_.plan.schedule[open.entry].point + " at " +
                                  at("schedule", open.entry) + " is not closed yet)");
        break;
      }
    }
    const State state = states_[name];
    if (state == State::kSharded) {
      context_.report(path, "reshards " + quote(name) + ", which is not gathered");
      return;
    }
    if (state == State::kGathering) {
      context_.report(path, "reshards " + quote(name) + " before waiting for its all-gather");
    }
    set_state(name, State::kSharded);
    lifetimes_[name].push_back({live_since_[name], e});
  }

  void reduce_scatter(const std::string& path, const std::string& name, size_t e,
                      const ScheduleEntry& entry, std::optional<Point> point, bool gathered) {
    if (!known(path, name)) return;
    const Unit& unit = *context_.unit(name);
    if (!context_.group_dtypes_known()) return;
    if (!has_any_gradient(unit)) {
      context_.report(path, quote(name) +
                                " has no gradient to reduce-scatter "
                                "(no floating group requires grad)");
      return;
    }
    const auto [first, fresh] = reduce_scattered_at_.emplace(name, e);
    if (point != Point::kPostBackward || entry.unit != name) {
      context_.report(path, "reduce-scatters " + quote(name) +
                                " outside its own post_backward, where its gradient is ready");
    } else if (entry.call != 0) {
      context_.report(path, "reduce-scatters " + quote(name) + " at call " +
                                std::to_string(entry.call) +
                                "; its gradient is complete only after call 0, the last "
                                "backward visit");
    } else if (!fresh) {
      context_.report(path, "reduce-scatters " + quote(name) + " twice (also at " +
                                at("schedule", first->second) + ")");
    } else if (!gathered) {
      context_.report(path,
                      "reduce-scatters " + quote(name) + ", which is not gathered at this point");
    }
  }

  // Keeps live_bytes_, the unsharded bytes of the units not SHARDED, up to date.
  void set_state(const std::string& name, State next) {
    State& state = states_[name];
    const int64_t bytes = context_.unit(name)->unsharded_bytes;
    if (state == State::kSharded && next != State::kSharded) live_bytes_ += bytes;
    if (state != State::kSharded && next == State::kSharded) live_bytes_ -= bytes;
    state = next;
  }

  void check_live_bytes(const std::string& path, const ScheduleEntry& entry) {
    const Wide live = live_bytes_;
    if (live != entry.unsharded_bytes) {
      context_.report(path + ".unsharded_bytes",
                      "is " + std::to_string(entry.unsharded_bytes) + ", expected " +
                          to_string(live) +
                          " (the units gathering or gathered after this entry's all-gathers, "
                          "before its reshards)");
    }
  }

  void close_call(const std::string& path, Point point, const std::string& unit, int64_t call) {
    const std::string opener = point == Point::kPostForward ? "pre_forward" : "pre_backward";
    for (size_t depth = open_.size(); depth-- > 0;) {
      if (open_[depth].unit != unit || open_[depth].call != call) continue;
      if (depth + 1 != open_.size()) {
        const OpenCall& inner = open_.back();
        context_.report(path, "closes " + call_name(unit, call) + " while " +
                                  call_name(inner.unit, inner.call) + " (opened at " +
                                  at("schedule", inner.entry) +
                                  ") is still open; pre and post entries nest like brackets");
      }
      open_.resize(depth);
      return;
    }
    context_.report(path, "closes " + call_name(unit, call) + ", which has no open " + opener);
  }

  // Reports the calls of the ending phase that were never closed.
  void close_phase(Point closer) {
    for (const OpenCall& open : open_) {
      context_.report(at("schedule", open.entry),
                      "opens " + call_name(open.unit, open.call) + ", which no " +
                          (closer == Point::kPostForward ? "post_forward" : "post_backward") +
                          " closes");
    }
    open_.clear();
  }

  void finish() {
    if (!end_entry_) {
      context_.report("schedule", "does not end with the end_of_backward entry");
      close_phase(Point::kPostBackward);
    }
    const size_t last = context_.plan.schedule.empty() ? 0 : context_.plan.schedule.size() - 1;
    for (const Unit& unit : context_.plan.units) {
      if (context_.unit(unit.name) != &unit) continue;
      const auto check_visits = [&](const char* point, std::map<std::string, int64_t>& visits) {
        if (visits[unit.name] < unit.call_count) {
          context_.report("schedule", "has " + std::to_string(visits[unit.name]) + " " + point +
                                          " entries for " + quote(unit.name) +
                                          ", expected its call_count " +
                                          std::to_string(unit.call_count));
        }
      };
      check_visits("pre_forward", pre_forward_visits_);
      check_visits("pre_backward", pre_backward_visits_);
      const State state = states_[unit.name];
      if (state != State::kSharded) {
        context_.report("schedule",
                        quote(unit.name) + " is still " +
                            (state == State::kGathering ? "being gathered" : "gathered") +
                            " at the end of backward; reshard it by end_of_backward");
        lifetimes_[unit.name].push_back({live_since_[unit.name], last});
      }
      if (context_.group_dtypes_known() && unit.call_count > 0 && has_any_gradient(unit) &&
          !reduce_scattered_at_.count(unit.name)) {
        context_.report("schedule",
                        "never reduce-scatters " + quote(unit.name) + ", whose gradient needs it");
      }
    }
  }

  Context& context_;
  std::map<std::string, State> states_;
  Wide live_bytes_ = 0;
  std::map<std::string, size_t> live_since_;
  Lifetimes lifetimes_;
  std::vector<OpenCall> open_;
  std::map<std::string, int64_t> pre_forward_visits_;
  std::map<std::string, int64_t> pre_backward_visits_;
  std::map<std::string, size_t> reduce_scattered_at_;
  std::optional<size_t> backward_start_;
  std::optional<size_t> end_entry_;
};

}  // namespace

Lifetimes check_schedule(Context& context) {
  return ScheduleReplay(context).run();
}

}  // namespace mfsdp::schema::check
