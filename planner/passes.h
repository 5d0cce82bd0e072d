#pragma once
// The planner pipeline after the scope closes, one pass per function, run in this order by
// ShardingScope::finalize. Each reads what earlier passes wrote into the PlanIR and throws
// Error(kPlanning) when the plan cannot be honoured.

#include "planner/plan_ir.h"

namespace mfsdp::planner {

// Parents and roots from the module tree; registered units must already be in `units`.
void link_units(PlanIR& ir);
// Which unit owns each parameter, by definition and by use; hoists shared ones (diagnosed).
// Parameters outside every unit of the scope stay out of the plan, with an
// "ownership.unmanaged" warning (the CLI, which plans whole models, refuses such plans).
void assign_ownership(PlanIR& ir);
// Per unit: (dtype, requires_grad) groups with aligned offsets, padding and shard sizes.
void lay_out_groups(PlanIR& ir);
// The unit call trace, call counts, flags and the forward/backward orders (diagnosed). With a
// traced run, the trace, counts and orders are the traced ones, diagnosed where they differ
// from or contradict the static call graph, and the plan's trace section is filled in.
void derive_orders(PlanIR& ir);
// The per-microbatch schedule of all-gathers, waits, reshards and reduce-scatters, and the
// live unsharded bytes at each point; enforces the resident budget.
void build_schedule(PlanIR& ir);
// Static buffer slots: interval colouring of the unsharded-buffer lifetimes.
void assign_slots(PlanIR& ir);
// With a traced run: its activation memory, per unit and at its peak (memory.activations;
// emit_plan adds the combined peak).
void measure_activations(PlanIR& ir);
// The plan file's form of the IR.
schema::Plan emit_plan(const PlanIR& ir);

// The layout and byte arithmetic itself lives in schema/plan_rules.h, shared with check_plan.

}  // namespace mfsdp::planner
