#include "schema/schedule_cursor.h"

#include <algorithm>
#include <map>

#include "schema/error.h"

namespace mfsdp::schema {
namespace {

const char* point_name(Point p) {
  switch (p) {
    case Point::kPreForward:
      return "pre_forward";
    case Point::kPostForward:
      return "post_forward";
    case Point::kPreBackward:
      return "pre_backward";
    case Point::kPostBackward:
      return "post_backward";
    case Point::kEndOfBackward:
      return "end_of_backward";
  }
  return "?";
}

bool is_pre(Point p) {
  return p == Point::kPreForward || p == Point::kPreBackward;
}

}  // namespace

std::optional<Point> point_named(const std::string& name) {
  for (Point p : {Point::kPreForward, Point::kPostForward, Point::kPreBackward,
                  Point::kPostBackward, Point::kEndOfBackward}) {
    if (name == point_name(p)) return p;
  }
  return std::nullopt;
}

Point parse_point(const std::string& point) {
  if (const std::optional<Point> p = point_named(point)) return *p;
  fail(ExitCode::kInternal, "schedule point '" + point + "' is none the executor knows");
}

namespace {

std::map<std::string, int> unit_indices(const Plan& plan) {
  std::map<std::string, int> index;
  for (size_t u = 0; u < plan.units.size(); ++u) index[plan.units[u].name] = static_cast<int>(u);
  return index;
}

std::string describe(const ScheduleEntry& e) {
  return e.point + (e.unit ? " " + *e.unit : "") + " (call " + std::to_string(e.call) + ")";
}

}  // namespace

ScheduleCursor::ScheduleCursor(const Plan& plan) : plan_(plan) {
  const auto index = unit_indices(plan);
  auto indices = [&](const std::vector<std::string>& names) {
    std::vector<int> out;
    for (const auto& n : names) out.push_back(index.at(n));
    return out;
  };
  for (const auto& e : plan.schedule) {
    entries_.push_back({parse_point(e.point), e.phase == "backward",
                        e.unit ? index.at(*e.unit) : -1, indices(e.all_gather), indices(e.wait),
                        indices(e.reshard)});
  }
  planned_.assign(plan.units.size() * kPoints, 0);
  for (const Entry& e : entries_) {
    if (e.unit >= 0) ++planned_[e.unit * kPoints + static_cast<size_t>(e.point)];
  }
  reached_.assign(planned_.size(), 0);
}

void ScheduleCursor::restart() {
  next_ = 0;
  std::fill(reached_.begin(), reached_.end(), 0);
}

void ScheduleCursor::run_entry(size_t index, std::vector<ScheduleAction>& out) {
  const Entry& e = entries_[index];
  for (int u : e.all_gather) out.push_back({ScheduleAction::Kind::kAllGather, u});
  for (int u : e.wait) out.push_back({ScheduleAction::Kind::kWait, u});
  for (int u : e.reshard) out.push_back({ScheduleAction::Kind::kReshard, u});
}

namespace {

// How to get a plan this step can follow: a static plan counts one call per call site under
// data-dependent control flow, which only a traced step settles; a traced plan follows the
// path its own inputs took.
std::string replan_advice(const Plan& plan, const Unit& unit) {
  const std::string how = "(docs/ordering.md#traced-orders)";
  if (plan.trace) {
    return "re-plan with the model's real unit order: `mfsdp plan --trace-input` with inputs "
           "that take this step's path " +
           how;
  }
  if (unit.repeated || unit.conditional) {
    return "unit " + unit.name + " is called under data-dependent control flow (" +
           (unit.repeated ? "a loop" : "an if") +
           "), which a static plan cannot count: re-plan with `mfsdp plan --trace-input SHAPE` "
           "so the plan follows a real step " +
           how;
  }
  return "re-plan with the model's real unit order (`mfsdp plan --trace-input SHAPE` records it "
         "from a real step) " +
         how;
}

}  // namespace

std::vector<ScheduleAction> ScheduleCursor::on_event(Point point, int unit) {
  const std::string wanted = point_name(point);
  const size_t slot = unit * kPoints + static_cast<size_t>(point);
  ++reached_.at(slot);
  size_t match = next_;
  while (match < entries_.size() &&
         !(entries_[match].unit == unit && entries_[match].point == point)) {
    ++match;
  }
  if (match == entries_.size()) {
    // Running a unit after its planned point would need an all-gather the plan does not
    // have (and its slot may be taken): other ranks would not issue it, so this is fatal.
    const std::string& unit_name = plan_.units[unit].name;
    const bool more_often = reached_[slot] > planned_[slot];
    const std::string last = next_ > 0 ? describe(plan_.schedule[next_ - 1]) : "the start";
    fail(ExitCode::kRuntime,
         "unit " + unit_name + " reached " + wanted +
             (more_often
                  ? " more often than the plan counts (" + std::to_string(planned_[slot]) +
                        " per microbatch)"
                  : " later than the plan has it (the plan had already reached " + last + ")") +
             "; " + replan_advice(plan_, plan_.units[unit]));
  }
  std::vector<ScheduleAction> out;
  for (size_t i = next_; i < match; ++i) {
    // A unit that did not run is reported once, at its pre point; post_backward entries are
    // passed, never announced (gradients signal them separately).
    if (is_pre(entries_[i].point)) {
      divergences_.push_back(describe(plan_.schedule[i]) + " did not run before " + wanted + " " +
                             plan_.units[unit].name);
    }
    run_entry(i, out);
  }
  run_entry(match, out);
  next_ = match + 1;
  return out;
}

bool ScheduleCursor::in_backward() const {
  return next_ < entries_.size() && entries_[next_].backward;
}

std::vector<ScheduleAction> ScheduleCursor::finish() {
  std::vector<ScheduleAction> out;
  for (size_t i = next_; i < entries_.size(); ++i) {
    if (is_pre(entries_[i].point)) {
      divergences_.push_back(describe(plan_.schedule[i]) +
                             " did not run before the end of backward");
    }
    run_entry(i, out);
  }
  next_ = entries_.size();
  return out;
}

std::vector<ScheduleAction> ScheduleCursor::finish_forward() {
  std::vector<ScheduleAction> out;
  for (; next_ < entries_.size() && !entries_[next_].backward; ++next_) {
    run_entry(next_, out);
  }
  return out;
}

ReduceScatterOrder::ReduceScatterOrder(const Plan& plan) {
  const auto index = unit_indices(plan);
  for (const auto& e : plan.schedule) {
    for (const auto& name : e.reduce_scatter) order_.push_back(index.at(name));
  }
  is_ready_.assign(plan.units.size(), false);
}

void ReduceScatterOrder::restart() {
  next_ = 0;
  std::fill(is_ready_.begin(), is_ready_.end(), false);
}

std::vector<int> ReduceScatterOrder::ready(int unit) {
  is_ready_[unit] = true;
  std::vector<int> out;
  while (next_ < order_.size() && is_ready_[order_[next_]]) out.push_back(order_[next_++]);
  return out;
}

std::vector<int> ReduceScatterOrder::finish() {
  std::vector<int> out(order_.begin() + next_, order_.end());
  next_ = order_.size();
  return out;
}

}  // namespace mfsdp::schema
