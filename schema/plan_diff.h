#pragma once
// A semantic diff of two plans: the questions a reviewer asks about a planner change (which
// units appeared or changed hands, where the orders moved, what memory and communication
// cost), answered with typed changes instead of differing JSON lines. `mfsdp diff` renders it
// (cli/diff_render.h); docs/cli.md#mfsdp-diff documents every category.

#include <cstdint>
#include <string>
#include <vector>

#include "schema/plan.h"

namespace mfsdp::schema {

// The names --ignore and --include accept, each also covering the names below it ("model"
// covers "model.sha256"). Mostly JSON paths of the plan; "units.ownership" is which unit owns
// which parameter.
const std::vector<std::string>& diff_field_names();
// Fields that change with the machine or the mfsdp version, not with the plan:
// generator, model.path, model.sha256, and the measured trace.times.
const std::vector<std::string>& default_ignored_fields();

struct DiffOptions {
  std::vector<std::string> ignore = default_ignored_fields();
  std::vector<std::string> include;
  // The most specific rule covering `field` decides; --include wins a tie.
  bool ignores(const std::string& field) const;
};

// A value that differs, as JSON text: 2, "bfloat16", null, ["<root>"].
struct FieldChange {
  std::string field;  // "mesh.world_size", "memory.peak_at", "units.call_count", ...
  std::string old_value;
  std::string new_value;
};

// An integer of memory or communication that differs.
struct Quantity {
  std::string field;  // "memory.sharded_param_bytes", "communication.all_gather_count", ...
  int64_t old_value = 0;
  int64_t new_value = 0;
  bool is_bytes() const;
};

// Parameters passing between one unit and another, in definition order.
struct ParamFlow {
  std::string unit;   // the other unit; "" when the parameters are not in that plan at all
  bool kept = false;  // the other unit is in both plans
  std::vector<std::string> params;
  int64_t numel = 0;
  int64_t bytes = 0;  // in storage dtype, unsharded
};

// A unit that is not in both plans under one name. Each unit is in at most one change:
//  renamed  a unit only in the old plan and one only in the new own the same parameters;
//  split    a unit only in the old plan whose parameters now belong to two or more units;
//  merged   a unit only in the new plan whose parameters belonged to two or more units;
//  added    any other unit only in the new plan (flows: where its parameters were);
//  removed  any other unit only in the old plan (flows: where its parameters went).
// A new unit whose parameters all come from one split unit is told by the split, and an old
// unit whose parameters all went to one merged unit by the merge.
struct UnitChange {
  enum class Kind { kAdded, kRemoved, kRenamed, kSplit, kMerged };
  Kind kind = Kind::kAdded;
  std::string name;      // the unit's name in its plan; renamed: the new name
  std::string old_name;  // renamed only
  std::string type;
  int64_t params = 0;  // parameters the unit owns (in the old plan for removed and split)
  int64_t numel = 0;
  std::vector<ParamFlow> flows;  // added, merged: from; removed, split: to; renamed: none
};
const char* unit_change_kind_name(UnitChange::Kind kind);  // "added", "removed", ...

// Parameters that changed owner between two units present in both plans (`from` "" for a
// parameter new to the model, `to` "" for one gone from it).
struct ParamMove {
  std::string from;
  std::string to;
  std::vector<std::string> params;
  int64_t numel = 0;
  int64_t bytes = 0;
};

// Flat layout of one unit: a group (subject "float32", "int64 (no grad)") or a parameter
// (subject its name). `what`: numel, padding or group (added/removed, value "" when absent)
// for groups; shape, offset, aliases, dtype or requires_grad for parameters.
struct LayoutChange {
  std::string subject;
  std::string what;
  std::string old_value;
  std::string new_value;
};

// A unit in both plans (by name, or renamed) whose attributes or layout differ. Its byte
// sizes are reported only together with a layout change: otherwise they follow the mesh or
// the policy, which the diff reports once.
struct UnitUpdate {
  std::string name;                 // in the new plan
  std::vector<FieldChange> fields;  // units.type, units.parent, units.call_count, ...
  std::vector<LayoutChange> layout;
};

// A unit whose position in forward_order or backward_order changed. Positions are 1-based;
// 0 means absent. Only units outside the longest common subsequence of the two orders count
// as moved, so inserting one unit does not move every unit after it.
struct OrderMove {
  std::string order;  // "forward_order" | "backward_order"
  std::string unit;   // in the new plan (the old name for a unit absent from it)
  int64_t old_position = 0;
  int64_t new_position = 0;
};

// Where a unit's k-th all-gather of a phase is issued: the prefetch decisions.
struct PrefetchChange {
  std::string unit;
  std::string phase;      // "forward" | "backward"
  int64_t index = 0;      // 0-based, among the unit's all-gathers in that phase
  std::string old_point;  // "pre_forward layers.0"; "" when there is no such all-gather
  std::string new_point;
};

// An entry (matched by phase, point, unit and call) whose other actions differ, or an entry
// only one schedule has, for units in both plans.
struct ScheduleChange {
  std::string point;  // "post_forward layers.0", "pre_backward shared#1"
  std::string what;   // entry, all_gather, wait, reshard, reduce_scatter, unsharded_bytes
  std::string old_value;
  std::string new_value;
};

struct DiagnosticChange {
  enum class Kind { kAdded, kRemoved, kChanged };  // changed: same severity, code and where
  Kind kind = Kind::kAdded;
  Diagnostic diagnostic;    // the new one; the old one for removed
  std::string old_message;  // changed only
};

// The totals thresholds look at.
struct PlanTotals {
  int64_t per_rank_bytes = 0;  // memory: sharded params + sharded grads + slots
  int64_t peak_unsharded_bytes = 0;
  int64_t communication_bytes = 0;  // one step of one microbatch: all-gather + reduce-scatter
                                    // + all-reduce
};
PlanTotals plan_totals(const Plan& plan);

struct PlanDiff {
  std::vector<std::string> ignored;  // the ignore rules in effect, for the reader
  std::vector<FieldChange> fields;   // generator, model.*, mesh.*, policy.*, streams, roots,
                                     // memory.peak_at, memory.slots, trace.* (times as
                                     // "trace.times[<unit>]"), and the fallback below
  std::vector<UnitChange> units;
  std::vector<ParamMove> moves;
  std::vector<UnitUpdate> updates;
  std::vector<OrderMove> orders;
  std::vector<PrefetchChange> prefetch;
  std::vector<ScheduleChange> schedule;
  std::vector<Quantity> quantities;  // memory.* and communication.* integers
  std::vector<DiagnosticChange> diagnostics;
  PlanTotals old_totals;
  PlanTotals new_totals;

  bool empty() const;
};

// Compares two parsed plans. Changes to fields `options` ignores are left out. If the plans
// differ in a way no category above describes, `fields` holds the first differing JSON path,
// so two plans that are not the same never give an empty diff.
PlanDiff diff_plans(const Plan& old_plan, const Plan& new_plan, const DiffOptions& options = {});

}  // namespace mfsdp::schema
