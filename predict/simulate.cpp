#include "predict/simulate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "schema/error.h"
#include "schema/plan_rules.h"
#include "schema/schedule_cursor.h"

namespace mfsdp::predict {

using schema::dtype_size;
using schema::Group;
using schema::main_grad_dtype;
using schema::padded_numel;
using schema::parse_point;
using schema::Plan;
using schema::Point;
using schema::ReduceScatterOrder;
using schema::ScheduleAction;
using schema::ScheduleCursor;
using schema::ScheduleEntry;
using schema::Unit;

double CollectiveCost::time_us(int64_t bytes) const {
  return latency_us + (bytes_per_us > 0 ? static_cast<double>(bytes) / bytes_per_us : 0.0);
}

namespace {

void check_cost(double value, const std::string& what) {
  if (!(value >= 0) || !std::isfinite(value)) {
    fail(ExitCode::kUsage, what + " must be a finite number >= 0, not " + std::to_string(value));
  }
}

void check_costs(const StepCosts& costs) {
  for (const auto& [name, c] :
       {std::pair<const char*, const CollectiveCost&>{"all-gather", costs.all_gather},
        {"reduce-scatter", costs.reduce_scatter},
        {"all-reduce", costs.all_reduce}}) {
    check_cost(c.latency_us, std::string(name) + " latency");
    check_cost(c.bytes_per_us, std::string(name) + " bandwidth");
  }
  for (const auto* per_unit :
       {&costs.forward_us, &costs.post_forward_us, &costs.backward_us, &costs.recompute_us}) {
    for (const auto& [unit, us] : *per_unit) check_cost(us, "the compute time of " + unit);
  }
  check_cost(costs.loss_us, "the loss's compute time");
  check_cost(costs.optimizer_us, "the optimizer's compute time");
  check_cost(costs.contention, "the contention");
  check_cost(costs.step_end_us, "the step's closing all-reduce");
}

// A span's name, as a run's --trace names it.
std::string label(const std::string& kind, const std::string& unit) {
  static const std::map<std::string, std::string> kWords = {
      {"forward", "forward "},
      {"after_forward", "after "},
      {"recompute", "recompute forward "},
      {"backward", "backward "},
      {"all_gather", "all-gather of "},
      {"wait_all_gather", "wait for all-gather of "},
      {"reduce_scatter", "reduce-scatter of "},
      {"all_reduce", "all-reduce across replicas of "},
      {"wait_reduce_scatters", "wait for reduce-scatters"},
      {"all_reduce_loss", "all-reduce of the loss"},
      {"wait_loss", "wait for the loss's all-reduce"}};
  const auto it = kWords.find(kind);
  return it == kWords.end() ? kind : it->second + unit;
}

double cost_of(const std::map<std::string, double>& per_unit, const std::string& unit) {
  const auto it = per_unit.find(unit);
  return it == per_unit.end() ? 0.0 : it->second;
}

// The replay: the clocks of compute and of the collective streams, and what ran when.
class Replay {
 public:
  Replay(const Plan& plan, const StepCosts& costs)
      : plan_(plan),
        costs_(costs),
        unified_(plan.policy.unified_stream),
        gathered_(plan.units.size(), 0.0) {
    const int64_t reduce_size = dtype_size(plan.policy.reduce_dtype);
    const int64_t main_grad_size = dtype_size(main_grad_dtype(plan.policy));
    for (const Unit& unit : plan.units) {
      int64_t reduce = 0, replicas = 0;
      for (const Group& group : unit.groups) {
        if (!group.requires_grad) continue;
        reduce += group.padded_numel * reduce_size;
        replicas += group.shard_numel * main_grad_size;
      }
      reduce_bytes_.push_back(reduce);
      replica_bytes_.push_back(plan.mesh.replicate_size > 1 ? replicas : 0);
    }
  }

  void perform(const std::vector<ScheduleAction>& actions) {
    for (const ScheduleAction& a : actions) {
      const std::string& name = plan_.units[static_cast<size_t>(a.unit)].name;
      switch (a.kind) {
        case ScheduleAction::Kind::kAllGather: {
          const int64_t bytes = plan_.units[static_cast<size_t>(a.unit)].unsharded_bytes;
          gathered_[static_cast<size_t>(a.unit)] = issue(
              gather_clock(), gather_track(), "all_gather", name, costs_.all_gather.time_us(bytes));
          break;
        }
        case ScheduleAction::Kind::kWait:
          wait_until(gathered_[static_cast<size_t>(a.unit)], "wait_all_gather", name);
          break;
        case ScheduleAction::Kind::kReshard:
          break;  // the slot's next all-gather is issued after compute's work so far anyway
      }
    }
  }

  void compute(double us, const std::string& kind, const std::string& unit = "") {
    if (us <= 0) return;
    const double end = finish(now_, us);
    spans_.push_back({"compute", label(kind, unit), now_, end, kind, unit});
    contention_us_ += end - now_ - us;
    now_ = end;
    compute_us_ += us;
  }

  // The unit's gradients are reduce-scattered (and, after the last microbatch of an HSDP
  // plan, all-reduced across replicas) on the reduce stream.
  void reduce(int unit, bool last_microbatch) {
    const std::string& name = plan_.units[static_cast<size_t>(unit)].name;
    const size_t u = static_cast<size_t>(unit);
    issue(reduce_clock(), reduce_track(), "reduce_scatter", name,
          costs_.reduce_scatter.time_us(reduce_bytes_[u]));
    if (last_microbatch && replica_bytes_[u] > 0) {
      issue(reduce_clock(), reduce_track(), "all_reduce", name,
            costs_.all_reduce.time_us(replica_bytes_[u]));
    }
  }

  double now() const { return now_; }
  void window(const std::string& unit, const std::string& phase, double start) {
    windows_.push_back({unit, phase, start, now_});
  }

  // The loss's all-reduce: issued by compute and waited for at once.
  void close_step(double us) {
    if (us <= 0) return;
    wait_until(issue(reduce_clock(), reduce_track(), "all_reduce_loss", "", us), "wait_loss", "");
  }

  void wait_for_reductions() { wait_until(reduce_clock(), "wait_reduce_scatters", ""); }

  Prediction result() {
    Prediction p;
    p.step_us = now_;
    p.compute_us = compute_us_;
    p.exposed_comm_us = exposed_us_;
    p.contention_us = contention_us_;
    p.timeline = std::move(spans_);
    p.windows = std::move(windows_);
    return p;
  }

 private:
  double& gather_clock() { return gather_; }
  double& reduce_clock() { return unified_ ? gather_ : reduce_; }
  const char* gather_track() const { return unified_ ? "unified" : "all_gather"; }
  const char* reduce_track() const { return unified_ ? "unified" : "reduce_scatter"; }

  // When `work` of compute begun at `t` ends: at 1 / (1 + contention * n) of its speed while n
  // collectives run. Every collective that overlaps it is issued already: a later issue starts
  // no earlier than compute's clock then, which is past this work.
  double finish(double t, double work) const {
    if (costs_.contention <= 0) return t + work;
    constexpr double kNever = std::numeric_limits<double>::infinity();
    while (true) {
      int running = 0;
      double next = kNever;  // the next start or end of a collective after t
      for (const auto& [start, end] : collectives_) {
        if (start <= t && t < end) {
          ++running;
          next = std::min(next, end);
        } else if (start > t) {
          next = std::min(next, start);
        }
      }
      const double rate = 1 / (1 + costs_.contention * running);
      if (next == kNever || (next - t) * rate >= work) return t + work / rate;
      work -= (next - t) * rate;
      t = next;
    }
  }

  // A collective starts once compute has issued everything before it and its stream is free.
  double issue(double& stream, const char* track, const std::string& kind, const std::string& unit,
               double us) {
    const double start = std::max(stream, now_);
    stream = start + us;
    spans_.push_back({track, label(kind, unit), start, stream, kind, unit});
    if (us > 0) collectives_.emplace_back(start, stream);
    return stream;
  }

  void wait_until(double ready, const std::string& kind, const std::string& unit) {
    if (ready <= now_) return;
    spans_.push_back({"compute", label(kind, unit), now_, ready, kind, unit});
    exposed_us_ += ready - now_;
    now_ = ready;
  }

  const Plan& plan_;
  const StepCosts& costs_;
  const bool unified_;
  std::vector<double> gathered_;  // by unit: when its last all-gather lands
  std::vector<int64_t> reduce_bytes_, replica_bytes_;
  double now_ = 0, gather_ = 0, reduce_ = 0;
  double compute_us_ = 0, exposed_us_ = 0, contention_us_ = 0;
  std::vector<std::pair<double, double>> collectives_;  // every collective's start and end
  std::vector<PredictedSpan> spans_;
  std::vector<UnitWindow> windows_;
};

}  // namespace

Prediction simulate_step(const Plan& plan, const StepCosts& costs, int64_t microbatches) {
  if (microbatches < 1) {
    fail(ExitCode::kUsage,
         "a step has at least one microbatch, not " + std::to_string(microbatches));
  }
  check_costs(costs);
  std::map<std::string, int> index;
  for (size_t u = 0; u < plan.units.size(); ++u) index[plan.units[u].name] = static_cast<int>(u);

  Replay replay(plan, costs);
  ScheduleCursor cursor(plan);
  ReduceScatterOrder order(plan);
  for (int64_t m = 0; m < microbatches; ++m) {
    const bool last = m + 1 == microbatches;
    cursor.restart();
    order.restart();
    bool in_backward = false;
    std::vector<std::vector<double>> forward_open(plan.units.size());
    std::vector<double> backward_open(plan.units.size(), 0.0);
    // The run the plan describes: its entries are the events, in its order. The executor
    // hears pre_forward, post_forward and pre_backward; post_backward entries are passed on
    // the way, and their units' gradients are complete there.
    for (const ScheduleEntry& entry : plan.schedule) {
      const Point point = parse_point(entry.point);
      if (point == Point::kEndOfBackward) break;
      const int u = index.at(*entry.unit);
      const Unit& unit = plan.units[static_cast<size_t>(u)];
      const double calls = static_cast<double>(std::max<int64_t>(unit.call_count, 1));
      if (entry.phase == "backward" && !in_backward) {
        in_backward = true;
        replay.compute(costs.loss_us, "loss");
      }
      switch (point) {
        case Point::kPreForward:
          replay.perform(cursor.on_event(point, u));
          forward_open[static_cast<size_t>(u)].push_back(replay.now());
          replay.compute(cost_of(costs.forward_us, unit.name) / calls, "forward", unit.name);
          break;
        case Point::kPostForward:
          if (!forward_open[static_cast<size_t>(u)].empty()) {
            replay.window(unit.name, "forward", forward_open[static_cast<size_t>(u)].back());
            forward_open[static_cast<size_t>(u)].pop_back();
          }
          replay.perform(cursor.on_event(point, u));
          replay.compute(cost_of(costs.post_forward_us, unit.name) / calls, "after_forward",
                         unit.name);
          break;
        case Point::kPreBackward:
          replay.perform(cursor.on_event(point, u));
          backward_open[static_cast<size_t>(u)] = replay.now();
          if (unit.checkpoint) {
            const auto listed = costs.recompute_us.find(unit.name);
            replay.compute(
                (listed != costs.recompute_us.end() ? listed->second
                                                    : cost_of(costs.forward_us, unit.name)) /
                    calls,
                "recompute", unit.name);
          }
          replay.compute(cost_of(costs.backward_us, unit.name) / calls, "backward", unit.name);
          break;
        default:  // post_backward: after its last call's (call 0), the unit's gradients
                  // are complete
          if (entry.call == 0) {
            replay.window(unit.name, "backward", backward_open[static_cast<size_t>(u)]);
            for (int w : order.ready(u)) replay.reduce(w, last);
          }
          break;
      }
    }
    replay.perform(cursor.finish());
    for (int w : order.finish()) replay.reduce(w, last);
    if (last) replay.wait_for_reductions();
  }
  replay.compute(costs.optimizer_us, "optimizer");
  replay.close_step(costs.step_end_us);
  return replay.result();
}

}  // namespace mfsdp::predict
