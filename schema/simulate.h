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

namespace mfsdp::schema {

// One collective kind's time: latency plus bytes over bandwidth. `bytes` is the collective's
// unsharded size: the all-gather's output, the reduce-scatter's input, the all-reduce's buffer.
struct CollectiveCost {
  double latency_us = 0;
  double bytes_per_us = 0;  // 0: no bandwidth term
  double time_us(int64_t bytes) const;
};

struct StepCosts {
  CollectiveCost all_gather, reduce_scatter, all_reduce;
  // Compute per unit, all its calls in one microbatch together (a trace's forward_ms and
  // backward_ms): from the unit's pre_forward (pre_backward) to the next unit's. A unit not
  // listed costs nothing. A checkpointed unit's forward is paid again in backward.
  std::map<std::string, double> forward_us, backward_us;
  double loss_us = 0;       // between the end of forward and the first pre_backward
  double optimizer_us = 0;  // after the last microbatch
};

// A span of the predicted timeline: "compute", "all_gather" or "reduce_scatter" (the stream's
// name under unified_stream: "unified").
struct PredictedSpan {
  std::string track, name;
  double start_us = 0, end_us = 0;
};

struct Prediction {
  double step_us = 0;          // from the first microbatch's start to the optimizer's end
  double compute_us = 0;       // compute's own work (forward, loss, backward, optimizer)
  double exposed_comm_us = 0;  // compute waiting for collectives
  std::vector<PredictedSpan> timeline;
};

// One optimizer step of `microbatches` microbatches by `plan` (checked by check_plan).
// Error(kUsage) for fewer than one microbatch or a negative cost.
Prediction simulate_step(const Plan& plan, const StepCosts& costs, int64_t microbatches);

}  // namespace mfsdp::schema
