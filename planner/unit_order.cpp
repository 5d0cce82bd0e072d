// derive_orders: unit forward/backward orders from the call trace, not from definition order.
// With a traced run (mfsdp plan --trace-input), the calls the traced step made replace the
// static estimate, and every place where the two disagree is diagnosed.
#include <algorithm>
#include <cmath>

#include "planner/passes.h"
#include "schema/error.h"

namespace mfsdp::planner {
namespace {

// Units of `order` outside one longest run that keeps definition order: the fewest units whose
// moves explain the difference.
std::vector<bool> moved_units(const std::vector<int>& definition_rank) {
  const size_t n = definition_rank.size();
  std::vector<int> tail_index, prev(n, -1);  // patience sorting
  for (size_t i = 0; i < n; ++i) {
    auto it = std::lower_bound(tail_index.begin(), tail_index.end(), definition_rank[i],
                               [&](int idx, int value) { return definition_rank[idx] < value; });
    if (it != tail_index.begin()) prev[i] = *(it - 1);
    if (it == tail_index.end()) {
      tail_index.push_back(static_cast<int>(i));
    } else {
      *it = static_cast<int>(i);
    }
  }
  std::vector<bool> moved(n, true);
  for (int i = tail_index.empty() ? -1 : tail_index.back(); i != -1; i = prev[i]) moved[i] = false;
  return moved;
}

// Unit calls in execution order, numbered per unit, and how many calls each unit has.
struct UnitCalls {
  std::vector<UnitCall> trace;
  std::vector<int64_t> count;
};

// From the static call trace; also sets the units' conditional and repeated flags.
UnitCalls static_calls(PlanIR& ir) {
  UnitCalls calls;
  calls.count.assign(ir.units.size(), 0);
  std::vector<std::vector<int64_t>> open(ir.units.size());
  UnitCallTracker tracker(ir);
  for (const CallEvent& e : ir.model->trace) {
    if (e.kind == CallEvent::Kind::kRead) continue;
    const int u =
        e.kind == CallEvent::Kind::kEnter ? tracker.enter(e.module) : tracker.exit(e.module);
    if (u == -1) continue;
    if (e.kind == CallEvent::Kind::kEnter) {
      open[u].push_back(calls.count[u]);
      calls.trace.push_back({true, u, calls.count[u]++});
      ir.units[u].conditional = ir.units[u].conditional || e.under_if;
      ir.units[u].repeated = ir.units[u].repeated || e.under_loop;
    } else {
      calls.trace.push_back({false, u, open[u].back()});
      open[u].pop_back();
    }
  }
  return calls;
}

[[noreturn]] void malformed(const std::string& what) {
  fail(ExitCode::kInternal, "the traced run is malformed: " + what + "; this is a bug in mfsdp");
}

// From the traced step's hooks, which nest like the calls they report.
UnitCalls traced_calls(const PlanIR& ir, const TracedRun& run) {
  const size_t n = ir.units.size();
  if (run.units.size() != n || run.forward_ms.size() != n || run.backward_ms.size() != n) {
    malformed("it has times for " + std::to_string(run.forward_ms.size()) + " unit(s), not " +
              std::to_string(n));
  }
  const auto check_unit = [&](int u) {
    if (u < 0 || static_cast<size_t>(u) >= n)
      malformed("unit " + std::to_string(u) + " is no unit");
  };
  UnitCalls calls;
  calls.count.assign(n, 0);
  std::vector<UnitCall> open;
  for (const TracedEvent& e : run.forward) {
    check_unit(e.unit);
    if (e.enter) {
      open.push_back({true, e.unit, calls.count[e.unit]++});
      calls.trace.push_back(open.back());
    } else {
      if (open.empty() || open.back().unit != e.unit) {
        malformed("post_forward of " + ir.units[e.unit].name + " closes no innermost open call");
      }
      calls.trace.push_back({false, e.unit, open.back().call});
      open.pop_back();
    }
  }
  if (!open.empty()) malformed(ir.units[open.back().unit].name + " has no post_forward");
  for (int u : run.backward) check_unit(u);
  return calls;
}

std::vector<int> first_entries(const std::vector<UnitCall>& trace) {
  std::vector<int> order;
  for (const UnitCall& c : trace) {
    if (c.enter && c.call == 0) order.push_back(c.unit);
  }
  return order;
}

// Backward roughly reverses forward, so a unit is needed first after its last call ends.
std::vector<int> reversed_last_exits(const UnitCalls& calls) {
  std::vector<int> order;
  for (auto c = calls.trace.rbegin(); c != calls.trace.rend(); ++c) {
    if (!c->enter && c->call == calls.count[c->unit] - 1) order.push_back(c->unit);
  }
  return order;
}

// Units in order of their first pre_backward; the units whose outputs got no gradient follow,
// in the static rule's order.
std::vector<int> traced_backward_order(const TracedRun& run, const UnitCalls& calls) {
  std::vector<int> order;
  std::vector<bool> listed(calls.count.size(), false);
  for (int u : run.backward) {
    if (!listed[u]) order.push_back(u);
    listed[u] = true;
  }
  for (int u : reversed_last_exits(calls)) {
    if (!listed[u]) order.push_back(u);
  }
  return order;
}

std::string times(int64_t n) {
  return std::to_string(n) + (n == 1 ? " time" : " times");
}

// Whether forward calls a child of `module` though not `module` itself: a container such as a
// ModuleList, whose own forward nobody calls.
bool called_children(const ModelIR& model, int module) {
  for (const CallEvent& e : model.trace) {
    if (e.kind == CallEvent::Kind::kEnter && e.module != module &&
        model.contains(module, e.module)) {
      return true;
    }
  }
  return false;
}

std::string container_fix(const std::string& unit) {
  return "forward calls its children instead (a container such as a ModuleList): shard them, "
         "e.g. --unit '" +
         unit + ".*'";
}

// The per-unit findings, units in registration order and each unit's codes in the order of
// docs/plan-format.md#diagnostics. `static_count` is null without a trace.
void diagnose_units(PlanIR& ir, const std::vector<int64_t>* static_count) {
  const TracedRun* run = ir.traced_run ? &*ir.traced_run : nullptr;
  for (size_t u = 0; u < ir.units.size(); ++u) {
    const UnitIR& unit = ir.units[u];
    const int64_t calls = unit.call_count;
    const int64_t sites = static_count ? (*static_count)[u] : calls;
    const bool settled_by_trace = unit.conditional || unit.repeated;
    if (calls == 0 && sites == 0) {
      const std::string container = called_children(*ir.model, unit.module)
                                        ? container_fix(unit.name)
                                        : "remove it from the scope if that is unintended";
      ir.diagnose("warning", "unit.never_called",
                  "unit " + unit.name +
                      " is not called by forward: it is never gathered and its "
                      "parameters get no gradients; " +
                      container,
                  unit.name);
    }
    if (run && calls == 0 && sites > 0 && settled_by_trace) {
      ir.diagnose("warning", "trace.not_called",
                  "unit " + unit.name + " has " + std::to_string(sites) +
                      " call site(s) under data-dependent control flow but did not run in the "
                      "traced step; the plan leaves it out of the orders and the schedule, so a "
                      "step that calls it fails in the executor; trace with inputs that take that "
                      "path, or plan without --trace-input",
                  unit.name);
    }
    if (run && calls != sites) {
      std::string why;
      if (sites == 0) {
        why =
            "the static call graph never reaches it (it is called in a way mfsdp cannot "
            "follow statically)";
      } else if (calls > sites && !unit.repeated) {
        why = "it has " + std::to_string(sites) + " static call site(s), none in a loop";
      } else if (calls < sites && !settled_by_trace) {
        why = "it has " + std::to_string(sites) +
              " static call site(s), none under data-dependent control flow";
      }
      if (!why.empty()) {
        ir.diagnose("warning", "trace.contradicts_static",
                    "unit " + unit.name + " ran " + times(calls) + " in the traced step, but " +
                        why + "; the plan follows the trace",
                    unit.name);
      }
    }
    if (unit.params.empty()) {
      ir.diagnose("info", "unit.empty",
                  "unit " + unit.name +
                      " owns no parameters; it only marks a boundary and "
                      "issues no collectives",
                  unit.name);
    }
    if (calls > 1) {
      ir.diagnose("info", "unit.called_multiple_times",
                  "unit " + unit.name + " is called " + std::to_string(calls) +
                      " times in forward; it stays gathered from its first call to its last, "
                      "and its gradients are reduced once, after its last backward",
                  unit.name);
    }
    if (unit.conditional) {
      ir.diagnose("warning", "unit.conditional",
                  "unit " + unit.name +
                      " is called under data-dependent control flow (prim::If); " +
                      (run ? "the plan follows the path the traced step took (" + times(calls) +
                                 "), and the executor reports where a step diverges from it"
                           : "the schedule assumes every branch runs, and the executor reports "
                             "where a step diverges from it"),
                  unit.name);
    }
    if (unit.repeated) {
      ir.diagnose("warning", "unit.in_loop",
                  "unit " + unit.name +
                      " is called inside a prim::Loop that mfsdp cannot unroll (its trip count "
                      "depends on data, or it would pass a million trace events); " +
                      (run ? "the plan counts the " + times(calls) + " the traced step called it"
                           : "the plan counts one call per call site") +
                      ", and the executor reports where a step diverges from it",
                  unit.name);
    }
    if (run && calls > 0 &&
        std::find(run->backward.begin(), run->backward.end(), u) == run->backward.end()) {
      ir.diagnose("info", "trace.no_backward",
                  "unit " + unit.name +
                      " ran in the traced forward, but no gradient reached its outputs in the "
                      "traced backward; it is placed at the end of backward_order",
                  unit.name);
    }
  }
}

void diagnose_definition_order(PlanIR& ir) {
  // Definition order is what named_modules() gives: module preorder.
  std::vector<int> by_definition = ir.forward_order;
  std::sort(by_definition.begin(), by_definition.end(),
            [&](int a, int b) { return ir.units[a].module < ir.units[b].module; });
  std::vector<int> definition_rank(ir.units.size());
  for (size_t i = 0; i < by_definition.size(); ++i) definition_rank[by_definition[i]] = i;
  std::vector<int> rank(ir.forward_order.size());
  for (size_t i = 0; i < ir.forward_order.size(); ++i)
    rank[i] = definition_rank[ir.forward_order[i]];
  const std::vector<bool> moved = moved_units(rank);
  const std::string total = std::to_string(ir.forward_order.size());
  for (size_t i = 0; i < ir.forward_order.size(); ++i) {
    if (!moved[i]) continue;
    const std::string& name = ir.units[ir.forward_order[i]].name;
    ir.diagnose("info", "order.differs_from_definition",
                "unit " + name + " runs at forward position " + std::to_string(i + 1) + " of " +
                    total + " but is defined at position " + std::to_string(rank[i] + 1) +
                    "; a definition-order prefetch (as in Megatron-FSDP v2) would gather it at the "
                    "wrong time",
                name);
  }
}

// Units whose calls are all unconditional, outside loops, and made as often as the static graph
// says run in one fixed order; a trace that runs them in another contradicts the graph.
void diagnose_order_contradictions(PlanIR& ir, const std::vector<int>& static_forward,
                                   const std::vector<int64_t>& static_count) {
  std::vector<int> static_position(ir.units.size(), -1);
  for (size_t i = 0; i < static_forward.size(); ++i) static_position[static_forward[i]] = i;
  const auto fixed = [&](int u) {
    const UnitIR& unit = ir.units[u];
    return static_count[u] > 0 && unit.call_count == static_count[u] && !unit.conditional &&
           !unit.repeated;
  };
  std::vector<size_t> traced_position;
  std::vector<int> rank;
  for (size_t i = 0; i < ir.forward_order.size(); ++i) {
    if (!fixed(ir.forward_order[i])) continue;
    traced_position.push_back(i);
    rank.push_back(static_position[ir.forward_order[i]]);
  }
  const std::vector<bool> moved = moved_units(rank);
  for (size_t k = 0; k < rank.size(); ++k) {
    if (!moved[k]) continue;
    const std::string& name = ir.units[ir.forward_order[traced_position[k]]].name;
    ir.diagnose("warning", "trace.contradicts_static",
                "unit " + name + " runs at forward position " +
                    std::to_string(traced_position[k] + 1) +
                    " in the traced step, but the static call graph, where its calls are "
                    "unconditional, places it at position " +
                    std::to_string(rank[k] + 1) + "; the plan follows the trace",
                name);
  }
}

// The schedule's backward entries reverse the forward calls; the traced backward may reach the
// units in another order (parallel branches), which only the trace can tell.
void diagnose_backward(PlanIR& ir, const TracedRun& run) {
  std::vector<bool> reached(ir.units.size(), false);
  for (int u : run.backward) reached[u] = true;
  std::vector<int> expected;
  for (auto c = ir.unit_trace.rbegin(); c != ir.unit_trace.rend(); ++c) {
    if (!c->enter && reached[c->unit]) expected.push_back(c->unit);
  }
  for (size_t i = 0; i < run.backward.size() && i < expected.size(); ++i) {
    if (run.backward[i] == expected[i]) continue;
    const std::string& name = ir.units[run.backward[i]].name;
    ir.diagnose("info", "trace.backward_differs",
                "the traced backward reached unit " + name + " at pre_backward " +
                    std::to_string(i + 1) + " of " + std::to_string(run.backward.size()) +
                    ", where the schedule, which reverses the forward calls, expects unit " +
                    ir.units[expected[i]].name +
                    "; backward_order and its prefetches follow the trace, and the executor "
                    "reports the difference on the first step",
                name);
    return;
  }
}

double rounded_ms(double ms) {
  return std::max(0.0, std::round(ms * 100.0) / 100.0);
}

schema::Trace trace_section(const PlanIR& ir, const std::vector<int64_t>& static_count,
                            const std::vector<int>& static_forward,
                            const std::vector<int>& static_backward) {
  const TracedRun& run = *ir.traced_run;
  schema::Trace trace;
  trace.inputs = run.inputs;
  std::vector<int64_t> count;
  for (const UnitIR& unit : ir.units) count.push_back(unit.call_count);
  if (count != static_count) trace.differs_from_static.push_back("units.call_count");
  if (ir.forward_order != static_forward) trace.differs_from_static.push_back("forward_order");
  if (ir.backward_order != static_backward) trace.differs_from_static.push_back("backward_order");
  if (run.device == TraceDevice::kMeta) {  // shapes and work, no times
    trace.device = trace_device_name(run.device);
    if (run.attention == Attention::kFused) trace.attention = "fused";
    for (int u : ir.forward_order) {
      trace.work.push_back({ir.units[u].name, run.pre_forward_work[u], run.post_forward_work[u],
                            run.backward_work[u]});
    }
    trace.loss_work = run.loss_work;
    return trace;
  }
  const auto fine = [](double ms) { return std::max(0.0, std::round(ms * 1000.0) / 1000.0); };
  for (int u : ir.forward_order) {
    schema::UnitTime time;
    time.unit = ir.units[u].name;
    time.forward_ms = rounded_ms(run.forward_ms[u]);
    time.backward_ms = rounded_ms(run.backward_ms[u]);
    if (static_cast<size_t>(u) < run.pre_forward_ms.size()) {
      time.pre_forward_ms = fine(run.pre_forward_ms[u]);
      time.post_forward_ms = fine(run.post_forward_ms[u]);
    }
    trace.times.push_back(time);
  }
  trace.loss_ms = fine(run.loss_ms);
  trace.timed_steps = run.timed_steps;
  trace.threads = run.threads;
  if (run.calibration_gflops > 0) {
    trace.calibration_gflops = std::round(run.calibration_gflops * 10.0) / 10.0;
  }
  return trace;
}

}  // namespace

void derive_orders(PlanIR& ir) {
  const UnitCalls static_result = static_calls(ir);
  const std::vector<int> static_forward = first_entries(static_result.trace);
  const std::vector<int> static_backward = reversed_last_exits(static_result);

  UnitCalls used = static_result;
  if (ir.traced_run) used = traced_calls(ir, *ir.traced_run);
  ir.unit_trace = used.trace;
  for (size_t u = 0; u < ir.units.size(); ++u) ir.units[u].call_count = used.count[u];
  ir.forward_order = first_entries(used.trace);
  ir.backward_order =
      ir.traced_run ? traced_backward_order(*ir.traced_run, used) : reversed_last_exits(used);

  diagnose_units(ir, ir.traced_run ? &static_result.count : nullptr);
  diagnose_definition_order(ir);
  if (!ir.traced_run) return;
  diagnose_order_contradictions(ir, static_forward, static_result.count);
  diagnose_backward(ir, *ir.traced_run);
  ir.trace = trace_section(ir, static_result.count, static_forward, static_backward);
}

}  // namespace mfsdp::planner
