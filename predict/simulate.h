#pragma once
// A plan's training step, predicted (issue 16's simulator). It replays the plan's schedule on
// the executor's stream model: one compute stream, the all-gather and reduce-scatter streams
// (one stream under unified_stream), each collective issued after compute's work so far and
// after the collectives before it on its stream, compute waiting for a unit's all-gather where
// the schedule says `wait`, reduce-scatters in the plan's order once a unit's gradients are
// complete, and compute waiting for the reduce-scatters only after a step's last microbatch.
// The order of issues and waits comes from the executor's own ScheduleCursor and
// ReduceScatterOrder (schedule_cursor.h), not from a second description of it.
//
// Costs are inputs: compute time per unit call (a trace measures them), and a latency plus a
// bandwidth per collective kind. What it leaves out: kernels that overlap compute and
// communication contending for the device, host overhead between kernels, memory allocation,
// ranks that reach a collective at different times, and the early reduce-scatters of a tied
// weight's first gradients. No LibTorch here.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "schema/plan.h"

namespace mfsdp::predict {

// One collective kind's time: latency plus bytes over bandwidth. `bytes` is the collective's
// unsharded size: the all-gather's output, the reduce-scatter's input, the all-reduce's buffer.
struct CollectiveCost {
  double latency_us = 0;
  double bytes_per_us = 0;  // 0: no bandwidth term
  double time_us(int64_t bytes) const;
};

struct StepCosts {
  CollectiveCost all_gather, reduce_scatter, all_reduce;
  // Compute per unit, all its calls in one microbatch together, each from a boundary of the
  // unit to the next boundary of any unit (a trace's pre_forward_ms, post_forward_ms and
  // backward_ms): forward_us after its pre_forward (its own code before a nested unit, or all
  // of it), post_forward_us after its post_forward (its enclosing unit's code that follows),
  // backward_us after its pre_backward. A unit not listed costs nothing. A checkpointed unit
  // runs its whole forward again in backward, before its backward_us: recompute_us (a trace's
  // forward_ms, nested units included), or forward_us when it is not listed.
  std::map<std::string, double> forward_us, post_forward_us, backward_us, recompute_us;
  double loss_us = 0;       // between the end of forward and the first pre_backward
  double optimizer_us = 0;  // after the last microbatch
  // The all-reduce of the step's loss over every rank that ends a step (after the
  // optimizer), which compute waits for.
  double step_end_us = 0;
  // Compute progresses at 1 / (1 + contention * n) of its speed while n collectives run
  // (predict::ComputeProfile::contention).
  double contention = 0;
};

// A span of the predicted timeline on a track: "compute", "all_gather" or "reduce_scatter"
// (the stream's name under unified_stream: "unified"). `kind` is what it is: "forward",
// "after_forward" (after a unit's post_forward), "recompute", "backward", "loss",
// "optimizer", "all_gather", "reduce_scatter", "all_reduce" (across replicas),
// "wait_all_gather" or "wait_reduce_scatters" (compute waiting); `unit` is the unit's name
// ("" for the loss, the optimizer and the wait for the reduce-scatters); `name` says it in
// words, as a run's --trace names its spans ("forward layers.0", "wait for all-gather of
// layers.1").
struct PredictedSpan {
  std::string track, name;
  double start_us = 0, end_us = 0;
  std::string kind, unit;
};

// When compute ran a unit as a run's --trace draws it: "forward" from the end of its
// pre_forward's wait to its post_forward (nested units included), "backward" from the end of
// its last pre_backward's wait to its gradients being complete. One per call and microbatch.
struct UnitWindow {
  std::string unit, phase;
  double start_us = 0, end_us = 0;
};

struct Prediction {
  double step_us = 0;          // from the first microbatch's start to the optimizer's end
  double compute_us = 0;       // compute's own work (forward, loss, backward, optimizer)
  double exposed_comm_us = 0;  // compute waiting for collectives
  double contention_us = 0;    // compute slowed by collectives running beside it
                               // (step = compute + exposed + contention)
  std::vector<PredictedSpan> timeline;
  std::vector<UnitWindow> windows;
};

// One optimizer step of `microbatches` microbatches by `plan` (checked by check_plan).
// Error(kUsage) for fewer than one microbatch or a negative cost.
Prediction simulate_step(const schema::Plan& plan, const StepCosts& costs, int64_t microbatches);

}  // namespace mfsdp::predict
