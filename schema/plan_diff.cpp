// diff_plans: one pass per category over two plans that share a unit naming. Units are matched
// by name, then leftover units by their parameter sets (renames); every later comparison goes
// through that matching, so a rename is reported once and not as changes everywhere.
#include "schema/plan_diff.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "schema/diff/differ.h"
#include "schema/error.h"
#include "schema/plan_rules.h"

namespace mfsdp::schema {

namespace diff {

PlanDiff Differ::run() {
  for (const std::string& rule : options_.ignore) {
    // Ignoring trace times is news only to a reader of plans that have a trace, and
    // ignoring the prediction to one of plans that have one.
    if (covers("trace", rule) && !old_.trace && !new_.trace) continue;
    if (rule == "prediction" && !old_.prediction && !new_.prediction) continue;
    if (options_.ignores(rule)) diff_.ignored.push_back(rule);
  }
  match_units();
  compare_header();
  compare_units();
  compare_orders();
  compare_schedule();
  compare_memory_and_communication();
  compare_diagnostics();
  compare_trace();
  compare_prediction();
  compare_training();
  diff_.old_totals = plan_totals(old_);
  diff_.new_totals = plan_totals(new_);
  if (diff_.empty()) add_fallback();
  return std::move(diff_);
}

}  // namespace diff

const std::vector<std::string>& diff_field_names() {
  static const std::vector<std::string> names = {
      "generator",
      "model",
      "model.path",
      "model.sha256",
      "model.structural_hash",
      "model.modules",
      "model.parameters",
      "model.parameter_numel",
      "mesh",
      "mesh.world_size",
      "mesh.shard_size",
      "mesh.replicate_size",
      "policy",
      "policy.param_dtype",
      "policy.reduce_dtype",
      "policy.reshard_after_forward",
      "policy.forward_prefetch",
      "policy.backward_prefetch",
      "policy.resident_budget_bytes",
      "policy.unified_stream",
      "policy.align_bytes",
      "streams",
      "units",
      "units.ownership",
      "units.type",
      "units.parent",
      "units.root",
      "units.call_count",
      "units.conditional",
      "units.repeated",
      "units.kept_after_forward",
      "units.checkpoint",
      "units.unsharded_bytes",
      "units.sharded_bytes",
      "units.groups",
      "units.buffers",
      "roots",
      "forward_order",
      "backward_order",
      "schedule",
      "memory",
      "memory.sharded_param_bytes",
      "memory.sharded_grad_bytes",
      "memory.peak_unsharded_bytes",
      "memory.peak_at",
      "memory.slot_bytes",
      "memory.slots",
      "memory.activations",
      "memory.activations.microbatch",
      "memory.activations.peak_bytes",
      "memory.activations.peak_at",
      "memory.activations.output_bytes",
      "memory.activations.loss",
      "memory.activations.combined_peak_bytes",
      "memory.activations.units",
      "communication",
      "communication.all_gather_count",
      "communication.all_gather_bytes",
      "communication.reduce_scatter_count",
      "communication.reduce_scatter_bytes",
      "communication.all_reduce_bytes",
      "diagnostics",
      "trace",
      "trace.inputs",
      "trace.differs_from_static",
      "trace.times",
      "trace.device",
      "trace.attention",
      "trace.work",
      "prediction",
  };
  return names;
}

const std::vector<std::string>& default_ignored_fields() {
  static const std::vector<std::string> names = {"generator", "model.path", "model.sha256",
                                                 "trace.times", "prediction"};
  return names;
}

bool DiffOptions::ignores(const std::string& field) const {
  size_t ignore_depth = 0, include_depth = 0;
  for (const auto& rule : ignore) {
    const bool taken_back = std::any_of(include.begin(), include.end(), [&](const std::string& i) {
      return diff::covers(i, rule);
    });
    if (!taken_back && diff::covers(rule, field))
      ignore_depth = std::max(ignore_depth, rule.size() + 1);
  }
  for (const auto& rule : include) {
    if (diff::covers(rule, field)) include_depth = std::max(include_depth, rule.size() + 1);
  }
  return ignore_depth > include_depth;
}

bool Quantity::is_bytes() const {
  return field.size() > 6 && field.compare(field.size() - 6, 6, "_bytes") == 0;
}

const char* unit_change_kind_name(UnitChange::Kind kind) {
  switch (kind) {
    case UnitChange::Kind::kAdded:
      return "added";
    case UnitChange::Kind::kRemoved:
      return "removed";
    case UnitChange::Kind::kRenamed:
      return "renamed";
    case UnitChange::Kind::kSplit:
      return "split";
    case UnitChange::Kind::kMerged:
      return "merged";
  }
  return "changed";
}

PlanTotals plan_totals(const Plan& plan) {
  const std::optional<int64_t> per_rank = per_rank_bytes(plan.memory);
  const std::optional<int64_t> communication = communication_bytes(plan.communication);
  if (!per_rank || !communication) {
    fail(ExitCode::kInternal, "a plan total overflowed that parse_plan let through");
  }
  PlanTotals totals;
  totals.per_rank_bytes = *per_rank;
  totals.peak_unsharded_bytes = plan.memory.peak_unsharded_bytes;
  totals.communication_bytes = *communication;
  return totals;
}

bool PlanDiff::empty() const {
  return fields.empty() && units.empty() && moves.empty() && updates.empty() && orders.empty() &&
         prefetch.empty() && schedule.empty() && quantities.empty() && diagnostics.empty();
}

PlanDiff diff_plans(const Plan& old_plan, const Plan& new_plan, const DiffOptions& options) {
  return diff::Differ(old_plan, new_plan, options).run();
}

}  // namespace mfsdp::schema
