#include "executor/runtime/schedule_cursor.h"

#include <algorithm>
#include <map>

#include "schema/error.h"

namespace mfsdp::executor {
namespace {

const char* point_name(Point p) {
  switch (p) {
    case Point::kPreForward:
      return "pre_forward";
    case Point::kPostForward:
      return "post_forward";
    case Point::kPreBackward:
      return "pre_backward";
  }
  return "?";
}

std::map<std::string, int> unit_indices(const schema::Plan& plan) {
  std::map<std::string, int> index;
  for (size_t u = 0; u < plan.units.size(); ++u) index[plan.units[u].name] = static_cast<int>(u);
  return index;
}

std::string describe(const schema::ScheduleEntry& e) {
  return e.point + (e.unit ? " " + *e.unit : "") + " (call " + std::to_string(e.call) + ")";
}

}  // namespace

ScheduleCursor::ScheduleCursor(const schema::Plan& plan) : plan_(plan) {
  const auto index = unit_indices(plan);
  auto indices = [&](const std::vector<std::string>& names) {
    std::vector<int> out;
    for (const auto& n : names) out.push_back(index.at(n));
    return out;
  };
  for (const auto& e : plan.schedule) {
    entries_.push_back({e.unit ? index.at(*e.unit) : -1, indices(e.all_gather), indices(e.wait),
                        indices(e.reshard)});
  }
  for (const auto& u : plan.units) unit_bytes_.push_back(u.unsharded_bytes);
}

void ScheduleCursor::restart() {
  next_ = 0;
  live_ = 0;
}

void ScheduleCursor::run_entry(size_t index, std::vector<ScheduleAction>& out) {
  const Entry& e = entries_[index];
  for (int u : e.all_gather) {
    out.push_back({ScheduleAction::Kind::kAllGather, u});
    live_ += unit_bytes_[u];
  }
  for (int u : e.wait) out.push_back({ScheduleAction::Kind::kWait, u});
  peak_ = std::max(peak_, live_);
  for (int u : e.reshard) {
    out.push_back({ScheduleAction::Kind::kReshard, u});
    live_ -= unit_bytes_[u];
  }
}

std::vector<ScheduleAction> ScheduleCursor::on_event(Point point, int unit) {
  const std::string wanted = point_name(point);
  size_t match = next_;
  while (match < plan_.schedule.size() &&
         !(entries_[match].unit == unit && plan_.schedule[match].point == wanted)) {
    ++match;
  }
  if (match == plan_.schedule.size()) {
    // Running a unit after its planned point would need an all-gather the plan does not
    // have (and its slot may be taken): other ranks would not issue it, so this is fatal.
    const std::string& unit_name = plan_.units[unit].name;
    bool planned_earlier = false;
    for (size_t i = 0; i < next_ && !planned_earlier; ++i) {
      planned_earlier = entries_[i].unit == unit && plan_.schedule[i].point == wanted;
    }
    const std::string last = next_ > 0 ? describe(plan_.schedule[next_ - 1]) : "the start";
    fail(ExitCode::kRuntime,
         "unit " + unit_name + " reached " + wanted +
             (planned_earlier
                  ? " later than the plan has it (the plan had already reached " + last + ")"
                  : " more often than the plan counts") +
             "; re-plan with the model's real unit order");
  }
  std::vector<ScheduleAction> out;
  for (size_t i = next_; i < match; ++i) {
    // A unit that did not run is reported once, at its pre point; post_backward entries are
    // passed, never announced (gradients signal them separately).
    const std::string& skipped = plan_.schedule[i].point;
    if (skipped == "pre_forward" || skipped == "pre_backward") {
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
  return next_ < plan_.schedule.size() && plan_.schedule[next_].phase == "backward";
}

std::vector<ScheduleAction> ScheduleCursor::finish() {
  std::vector<ScheduleAction> out;
  for (size_t i = next_; i < plan_.schedule.size(); ++i) {
    const std::string& point = plan_.schedule[i].point;
    if (point == "pre_forward" || point == "pre_backward") {
      divergences_.push_back(describe(plan_.schedule[i]) +
                             " did not run before the end of backward");
    }
    run_entry(i, out);
  }
  next_ = plan_.schedule.size();
  return out;
}

std::vector<ScheduleAction> ScheduleCursor::finish_forward() {
  std::vector<ScheduleAction> out;
  for (; next_ < plan_.schedule.size() && plan_.schedule[next_].phase == "forward"; ++next_) {
    run_entry(next_, out);
  }
  return out;
}

ReduceScatterOrder::ReduceScatterOrder(const schema::Plan& plan) {
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

bool ReduceScatterOrder::expects(int unit) const {
  return std::find(order_.begin(), order_.end(), unit) != order_.end();
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

}  // namespace mfsdp::executor
