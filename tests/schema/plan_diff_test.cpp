// diff_plans and check_thresholds on golden plans from plans/, each changed in one way here.

#include <algorithm>

#include <gtest/gtest.h>

#include "schema/plan_diff.h"
#include "schema/plan_diff_threshold.h"
#include "schema/plan_json.h"

namespace mfsdp::schema {
namespace {

Plan golden(const std::string& name) {
  ParseResult parsed =
      read_plan_file(std::string(MFSDP_SOURCE_DIR) + "/plans/" + name + ".plan.json");
  EXPECT_TRUE(parsed.problems.empty()) << name;
  return parsed.plan;
}

Unit& unit_named(Plan& plan, const std::string& name) {
  for (Unit& unit : plan.units) {
    if (unit.name == name) return unit;
  }
  throw std::runtime_error("no unit " + name);
}

void drop(std::vector<std::string>& names, const std::string& name) {
  names.erase(std::remove(names.begin(), names.end(), name), names.end());
}

// Removes a unit and every mention of it; its parameters go nowhere unless moved first.
void erase_unit(Plan& plan, const std::string& name) {
  plan.units.erase(std::remove_if(plan.units.begin(), plan.units.end(),
                                  [&](const Unit& u) { return u.name == name; }),
                   plan.units.end());
  drop(plan.forward_order, name);
  drop(plan.backward_order, name);
  drop(plan.roots, name);
  plan.schedule.erase(std::remove_if(plan.schedule.begin(), plan.schedule.end(),
                                     [&](const ScheduleEntry& e) { return e.unit == name; }),
                      plan.schedule.end());
  for (ScheduleEntry& e : plan.schedule) {
    for (auto* list : {&e.all_gather, &e.wait, &e.reshard, &e.reduce_scatter}) drop(*list, name);
  }
  for (Slot& slot : plan.memory.slots) drop(slot.units, name);
}

void rename_unit(Plan& plan, const std::string& from, const std::string& to) {
  const auto fix = [&](std::string& name) {
    if (name == from) name = to;
  };
  for (Unit& unit : plan.units) {
    fix(unit.name);
    if (unit.parent) fix(*unit.parent);
  }
  for (auto* list : {&plan.roots, &plan.forward_order, &plan.backward_order}) {
    for (auto& name : *list) fix(name);
  }
  for (ScheduleEntry& e : plan.schedule) {
    if (e.unit) fix(*e.unit);
    for (auto* list : {&e.all_gather, &e.wait, &e.reshard, &e.reduce_scatter}) {
      for (auto& name : *list) fix(name);
    }
  }
  for (Slot& slot : plan.memory.slots) {
    for (auto& name : slot.units) fix(name);
  }
  for (Diagnostic& d : plan.diagnostics) fix(d.where);
  const size_t space = plan.memory.peak_at.find(' ');
  if (plan.memory.peak_at.substr(space + 1) == from) {
    plan.memory.peak_at = plan.memory.peak_at.substr(0, space + 1) + to;
  }
}

// Moves unit `from`'s parameters into `to`'s first group and removes `from`.
void fold_into(Plan& plan, const std::string& from, const std::string& to) {
  std::vector<ParamLayout> params;
  for (const Group& group : unit_named(plan, from).groups) {
    params.insert(params.end(), group.params.begin(), group.params.end());
  }
  auto& target = unit_named(plan, to).groups.at(0).params;
  target.insert(target.end(), params.begin(), params.end());
  erase_unit(plan, from);
}

// A new unit owning the named parameters, taken out of whichever unit has them.
void carve_unit(Plan& plan, const std::string& name, const std::vector<std::string>& params) {
  Unit unit;
  unit.name = name;
  unit.type = "__torch__.fixtures.Part";
  unit.groups.push_back(Group{"float32", true, 0, 0, 0, {}});
  for (Unit& u : plan.units) {
    for (Group& g : u.groups) {
      for (auto it = g.params.begin(); it != g.params.end();) {
        if (std::count(params.begin(), params.end(), it->name)) {
          unit.groups[0].params.push_back(*it);
          it = g.params.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  plan.units.push_back(unit);
}

std::vector<std::string> fields_of(const PlanDiff& diff) {
  std::vector<std::string> out;
  for (const auto& change : diff.fields) out.push_back(change.field);
  return out;
}

TEST(PlanDiff, EveryGoldenPlanEqualsItself) {
  for (const char* name : {"tied_lm", "tied_lm_hoisted", "reordered", "called_twice", "mixed",
                           "two_roots", "conditional", "bytegpt"}) {
    EXPECT_TRUE(diff_plans(golden(name), golden(name)).empty()) << name;
  }
}

// Measured activations: present against absent is one field; between two traced plans the
// peak and each unit's saved bytes are quantities, and --ignore can drop the per-unit ones.
TEST(PlanDiff, ActivationsAreComparedAsQuantities) {
  const Plan untraced = golden("tied_lm");
  Plan a = untraced;
  Activations act;
  act.microbatch = 4;
  act.peak_bytes = 1000;
  act.peak_at = "loss";
  act.loss = "cross_entropy";
  for (const std::string& unit : a.forward_order) act.units.push_back({unit, 100});
  a.memory.activations = act;
  EXPECT_EQ(fields_of(diff_plans(untraced, a)), std::vector<std::string>{"memory.activations"});

  Plan b = a;
  b.memory.activations->peak_bytes = 1500;
  b.memory.activations->peak_at = "pre_backward layers.1";
  b.memory.activations->units[1].saved_bytes = 300;
  const PlanDiff diff = diff_plans(a, b);
  EXPECT_EQ(fields_of(diff), std::vector<std::string>{"memory.activations.peak_at"});
  std::vector<std::string> quantities;
  for (const Quantity& q : diff.quantities) quantities.push_back(q.field);
  const std::string unit = "memory.activations.units[" + a.forward_order[1] + "].saved_bytes";
  EXPECT_EQ(quantities, (std::vector<std::string>{"memory.activations.peak_bytes", unit}));
  EXPECT_TRUE(diff.quantities.back().is_bytes());
  DiffOptions options;
  options.ignore = {"memory.activations.units"};
  EXPECT_EQ(diff_plans(a, b, options).quantities.size(), 1u);
}

// A shape-only trace's work is compared by default, per unit, and --ignore trace.work drops it;
// a CPU trace against a meta one shows the device.
TEST(PlanDiff, AMetaTracesWorkIsComparedPerUnit) {
  Plan a = golden("tied_lm");
  Trace trace;
  trace.inputs = {"2x16:int64"};
  trace.device = "meta";
  for (const std::string& unit : a.forward_order) trace.work.push_back({unit, {}, {}, {}});
  trace.loss_work = Work{};
  a.trace = trace;
  Plan b = a;
  b.trace->work[1].backward.matmul.flops = 4096;
  const std::string unit = a.forward_order[1];
  EXPECT_EQ(fields_of(diff_plans(a, b)), std::vector<std::string>{"trace.work[" + unit + "]"});
  DiffOptions options;
  options.ignore = {"trace.work"};
  EXPECT_TRUE(diff_plans(a, b, options).empty());
  Plan cpu = a;
  cpu.trace->device.reset();
  cpu.trace->work.clear();
  cpu.trace->loss_work.reset();
  const std::vector<std::string> fields = fields_of(diff_plans(cpu, a));
  ASSERT_FALSE(fields.empty());
  EXPECT_EQ(fields.front(), "trace.device");
}

TEST(PlanDiff, VolatileFieldsAreIgnoredUnlessIncluded) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  b.generator = "mfsdp 9.9.9";
  b.model.path = "/elsewhere/tied_lm.pt";
  b.model.sha256 = std::string(64, 'f');
  EXPECT_TRUE(diff_plans(a, b).empty());
  DiffOptions options;
  options.include = {"model.sha256"};
  EXPECT_EQ(fields_of(diff_plans(a, b, options)), std::vector<std::string>{"model.sha256"});
  options.include = {"model"};
  EXPECT_EQ(fields_of(diff_plans(a, b, options)),
            (std::vector<std::string>{"model.path", "model.sha256"}));
}

TEST(PlanDiff, MostSpecificIgnoreRuleWinsAndIncludeWinsATie) {
  DiffOptions options;
  options.ignore = {"model", "units"};
  options.include = {"model.structural_hash", "units"};
  EXPECT_TRUE(options.ignores("model.modules"));
  EXPECT_FALSE(options.ignores("model.structural_hash"));
  EXPECT_FALSE(options.ignores("units.groups"));
  EXPECT_FALSE(options.ignores("modelx"));
  EXPECT_FALSE(options.ignores("mesh.world_size"));
  // --include takes back the ignore rules under it.
  DiffOptions defaults;
  defaults.include = {"model"};
  EXPECT_FALSE(defaults.ignores("model.sha256"));
  EXPECT_TRUE(defaults.ignores("generator"));
}

TEST(PlanDiff, MeshAndPolicyChangesAreFieldChanges) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  b.mesh.world_size = 4;
  b.mesh.shard_size = 4;
  b.policy.forward_prefetch = 2;
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.fields.size(), 3u);
  EXPECT_EQ(diff.fields[0].field, "mesh.world_size");
  EXPECT_EQ(diff.fields[0].old_value, "2");
  EXPECT_EQ(diff.fields[0].new_value, "4");
  EXPECT_EQ(diff.fields[2].field, "policy.forward_prefetch");
  EXPECT_TRUE(diff.updates.empty());  // unit byte sizes follow the mesh; not repeated per unit
}

TEST(PlanDiff, RemovedUnitIsMergedIntoTheUnitThatNowOwnsItsParameters) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  fold_into(b, "layers.1", "<root>");
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.units.size(), 1u);
  const UnitChange& change = diff.units[0];
  EXPECT_EQ(change.kind, UnitChange::Kind::kRemoved);
  EXPECT_EQ(change.name, "layers.1");
  EXPECT_EQ(change.type, "__torch__.fixtures.Block");
  ASSERT_EQ(change.flows.size(), 1u);
  EXPECT_EQ(change.flows[0].unit, "<root>");
  EXPECT_TRUE(change.flows[0].kept);
  EXPECT_EQ(change.flows[0].params.size(), 12u);
  EXPECT_EQ(change.flows[0].params.front(), "layers.1.ln1.weight");
  EXPECT_EQ(change.flows[0].bytes, 4 * change.numel);
  EXPECT_TRUE(diff.moves.empty());
  // Gone from both orders, and nothing else moved in them.
  ASSERT_EQ(diff.orders.size(), 2u);
  EXPECT_EQ(diff.orders[0].unit, "layers.1");
  EXPECT_EQ(diff.orders[0].old_position, 3);
  EXPECT_EQ(diff.orders[0].new_position, 0);
}

TEST(PlanDiff, AddedUnitIsSplitOffTheUnitThatOwnedItsParameters) {
  Plan a = golden("tied_lm");
  const Plan b = a;
  fold_into(a, "layers.1", "<root>");
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.units.size(), 1u);
  EXPECT_EQ(diff.units[0].kind, UnitChange::Kind::kAdded);
  EXPECT_EQ(diff.units[0].name, "layers.1");
  ASSERT_EQ(diff.units[0].flows.size(), 1u);
  EXPECT_EQ(diff.units[0].flows[0].unit, "<root>");
  EXPECT_TRUE(diff.units[0].flows[0].kept);
  EXPECT_EQ(diff.units[0].params, 12);
}

TEST(PlanDiff, UnitWithTheSameParametersUnderANewNameIsRenamed) {
  const Plan a = golden("reordered");
  Plan b = a;
  rename_unit(b, "blocks.2", "blocks.two");  // also where memory peaks
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.units.size(), 1u);
  EXPECT_EQ(diff.units[0].kind, UnitChange::Kind::kRenamed);
  EXPECT_EQ(diff.units[0].old_name, "blocks.2");
  EXPECT_EQ(diff.units[0].name, "blocks.two");
  EXPECT_EQ(diff.units[0].params, 4);
  // Orders, schedule and slots name the unit too: matched through the rename, not repeated.
  EXPECT_TRUE(diff.orders.empty());
  EXPECT_TRUE(diff.prefetch.empty());
  EXPECT_TRUE(diff.schedule.empty());
  EXPECT_TRUE(diff.fields.empty());
  EXPECT_TRUE(diff.updates.empty());
}

TEST(PlanDiff, UnitWhoseParametersGoToSeveralNewUnitsIsSplit) {
  const Plan a = golden("reordered");
  Plan b = a;
  carve_unit(b, "blocks.0.fc1", {"blocks.0.fc1.weight", "blocks.0.fc1.bias"});
  carve_unit(b, "blocks.0.fc2", {"blocks.0.fc2.weight", "blocks.0.fc2.bias"});
  erase_unit(b, "blocks.0");
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.units.size(), 1u);  // the two new units are told by the split
  const UnitChange& split = diff.units[0];
  EXPECT_EQ(split.kind, UnitChange::Kind::kSplit);
  EXPECT_EQ(split.name, "blocks.0");
  ASSERT_EQ(split.flows.size(), 2u);
  EXPECT_EQ(split.flows[0].unit, "blocks.0.fc1");
  EXPECT_FALSE(split.flows[0].kept);
  EXPECT_EQ(split.flows[0].params,
            (std::vector<std::string>{"blocks.0.fc1.weight", "blocks.0.fc1.bias"}));
  EXPECT_EQ(split.flows[1].unit, "blocks.0.fc2");

  const PlanDiff back = diff_plans(b, a);
  ASSERT_EQ(back.units.size(), 1u);
  EXPECT_EQ(back.units[0].kind, UnitChange::Kind::kMerged);
  EXPECT_EQ(back.units[0].name, "blocks.0");
  ASSERT_EQ(back.units[0].flows.size(), 2u);
  EXPECT_EQ(back.units[0].flows[1].unit, "blocks.0.fc2");
}

TEST(PlanDiff, ParametersMovingBetweenUnitsInBothPlansAreMoves) {
  const Plan a = golden("reordered");
  Plan b = a;
  auto& head = unit_named(b, "head").groups[0].params;
  unit_named(b, "stem").groups[0].params.push_back(head.back());
  head.pop_back();
  const PlanDiff diff = diff_plans(a, b);
  EXPECT_TRUE(diff.units.empty());
  ASSERT_EQ(diff.moves.size(), 1u);
  EXPECT_EQ(diff.moves[0].from, "head");
  EXPECT_EQ(diff.moves[0].to, "stem");
  EXPECT_EQ(diff.moves[0].params, std::vector<std::string>{"head.bias"});
}

TEST(PlanDiff, AMovedUnitIsOneOrderMoveNotAShiftOfEveryUnit) {
  const Plan a = golden("reordered");  // <root> stem blocks.2 blocks.0 blocks.1 head
  Plan b = a;
  b.forward_order = {"<root>", "blocks.2", "blocks.0", "blocks.1", "stem", "head"};
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.orders.size(), 1u);
  EXPECT_EQ(diff.orders[0].order, "forward_order");
  EXPECT_EQ(diff.orders[0].unit, "stem");
  EXPECT_EQ(diff.orders[0].old_position, 2);
  EXPECT_EQ(diff.orders[0].new_position, 5);
}

TEST(PlanDiff, AnInsertedUnitMovesNoOtherUnit) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  b.forward_order.insert(b.forward_order.begin() + 1, "wte");
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.orders.size(), 1u);
  EXPECT_EQ(diff.orders[0].unit, "wte");
  EXPECT_EQ(diff.orders[0].old_position, 0);
  EXPECT_EQ(diff.orders[0].new_position, 2);
}

TEST(PlanDiff, LayoutChangesNameTheGroupOrParameter) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  Group& group = unit_named(b, "layers.0").groups[0];
  group.padded_numel += 16;
  group.params[0].shape = {16, 2};
  group.params[1].offset += 16;
  unit_named(b, "layers.0").unsharded_bytes += 64;
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.updates.size(), 1u);
  const UnitUpdate& update = diff.updates[0];
  EXPECT_EQ(update.name, "layers.0");
  ASSERT_EQ(update.layout.size(), 3u);
  EXPECT_EQ(update.layout[0].subject, "float32");
  EXPECT_EQ(update.layout[0].what, "padding");
  EXPECT_EQ(update.layout[0].new_value, "16");
  EXPECT_EQ(update.layout[1].subject, "layers.0.ln1.weight");
  EXPECT_EQ(update.layout[1].what, "shape");
  EXPECT_EQ(update.layout[1].new_value, "[16,2]");
  EXPECT_EQ(update.layout[2].what, "offset");
  // With a layout change, the unit's byte sizes are reported too.
  ASSERT_EQ(update.fields.size(), 1u);
  EXPECT_EQ(update.fields[0].field, "units.unsharded_bytes");
}

TEST(PlanDiff, UnitAttributesAreCompared) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  unit_named(b, "layers.1").call_count = 2;
  unit_named(b, "layers.1").kept_after_forward = true;
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.updates.size(), 1u);
  ASSERT_EQ(diff.updates[0].fields.size(), 2u);
  EXPECT_EQ(diff.updates[0].fields[0].field, "units.call_count");
  EXPECT_EQ(diff.updates[0].fields[1].field, "units.kept_after_forward");
  EXPECT_EQ(diff.updates[0].fields[1].new_value, "true");
}

TEST(PlanDiff, PrefetchChangesSayWhereAnAllGatherIsIssued) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  // Prefetch layers.1 at pre_forward <root> instead of pre_forward layers.0.
  b.schedule[0].all_gather.push_back("layers.1");
  b.schedule[1].all_gather.clear();
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.prefetch.size(), 1u);
  EXPECT_EQ(diff.prefetch[0].unit, "layers.1");
  EXPECT_EQ(diff.prefetch[0].phase, "forward");
  EXPECT_EQ(diff.prefetch[0].old_point, "pre_forward layers.0");
  EXPECT_EQ(diff.prefetch[0].new_point, "pre_forward <root>");
  EXPECT_TRUE(diff.schedule.empty());
}

TEST(PlanDiff, OtherScheduleActionsAreComparedPerEntry) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  b.schedule[2].reshard.clear();  // post_forward layers.0
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.schedule.size(), 1u);
  EXPECT_EQ(diff.schedule[0].point, "post_forward layers.0");
  EXPECT_EQ(diff.schedule[0].what, "reshard");
  EXPECT_EQ(diff.schedule[0].old_value, "[\"layers.0\"]");
  EXPECT_EQ(diff.schedule[0].new_value, "[]");
}

TEST(PlanDiff, MemoryAndCommunicationAreQuantitiesWithTotals) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  b.memory.slot_bytes += a.memory.slot_bytes / 2;
  b.communication.all_gather_bytes *= 2;
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.quantities.size(), 2u);
  EXPECT_EQ(diff.quantities[0].field, "memory.slot_bytes");
  EXPECT_TRUE(diff.quantities[0].is_bytes());
  EXPECT_EQ(diff.new_totals.per_rank_bytes - diff.old_totals.per_rank_bytes,
            a.memory.slot_bytes / 2);
  EXPECT_EQ(diff.new_totals.communication_bytes - diff.old_totals.communication_bytes,
            a.communication.all_gather_bytes);
}

TEST(PlanDiff, DiagnosticsAreMatchedBySeverityCodeAndWhere) {
  const Plan a = golden("tied_lm_hoisted");
  Plan b = a;
  b.diagnostics[0].message = "reworded";
  b.diagnostics.erase(b.diagnostics.begin() + 1);
  b.diagnostics.push_back({"warning", "unit.never_called", "never called", "layers"});
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.diagnostics.size(), 3u);
  EXPECT_EQ(diff.diagnostics[0].kind, DiagnosticChange::Kind::kChanged);
  EXPECT_EQ(diff.diagnostics[0].diagnostic.code, "ownership.hoisted");
  EXPECT_EQ(diff.diagnostics[1].kind, DiagnosticChange::Kind::kAdded);
  EXPECT_EQ(diff.diagnostics[1].diagnostic.code, "unit.never_called");
  EXPECT_EQ(diff.diagnostics[2].kind, DiagnosticChange::Kind::kRemoved);
  EXPECT_EQ(diff.diagnostics[2].diagnostic.where, "wte");
}

TEST(PlanDiff, IgnoredSectionsAreLeftOut) {
  const Plan a = golden("tied_lm_hoisted");
  Plan b = a;
  b.diagnostics.clear();
  b.policy.backward_prefetch = 3;
  DiffOptions options;
  options.ignore.push_back("diagnostics");
  options.ignore.push_back("policy");
  EXPECT_TRUE(diff_plans(a, b, options).empty());
}

TEST(PlanDiff, ADifferenceNoCategoryDescribesIsStillReported) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  b.memory.slots[1].bytes += 16;  // the slot sizes are summed up in memory.slot_bytes only
  const PlanDiff diff = diff_plans(a, b);
  ASSERT_EQ(diff.fields.size(), 1u);
  EXPECT_EQ(diff.fields[0].field, "memory.slots[1].bytes");
  EXPECT_EQ(diff.fields[0].old_value, "50816");
  EXPECT_EQ(diff.fields[0].new_value, "50832");
}

TEST(PlanDiff, PlansBreakingUniquenessRulesStillDiff) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  b.units.push_back(b.units[1]);
  b.forward_order.push_back("layers.0");
  EXPECT_FALSE(diff_plans(a, b).empty());
  EXPECT_FALSE(diff_plans(b, a).empty());
}

// A name used twice pairs its units by occurrence: a plan equals itself, a change to the
// second occurrence is that unit's change, and an extra occurrence is an added unit.
TEST(PlanDiff, UnitsSharingANamePairByOccurrence) {
  Plan a = golden("tied_lm");
  Unit twin = a.units[1];
  twin.call_count = 0;
  a.units.push_back(twin);
  EXPECT_TRUE(diff_plans(a, a).empty());

  Plan b = a;
  b.units.back().call_count = 3;
  const PlanDiff changed = diff_plans(a, b);
  ASSERT_EQ(changed.updates.size(), 1u);
  EXPECT_EQ(changed.updates[0].name, twin.name);
  ASSERT_EQ(changed.updates[0].fields.size(), 1u);
  EXPECT_EQ(changed.updates[0].fields[0].old_value, "0");
  EXPECT_EQ(changed.updates[0].fields[0].new_value, "3");

  Plan c = a;
  c.units.push_back(twin);
  const PlanDiff added = diff_plans(a, c);
  ASSERT_EQ(added.units.size(), 1u);
  EXPECT_EQ(added.units[0].kind, UnitChange::Kind::kAdded);
  EXPECT_EQ(added.units[0].name, twin.name);
  const PlanDiff removed = diff_plans(c, a);
  ASSERT_EQ(removed.units.size(), 1u);
  EXPECT_EQ(removed.units[0].kind, UnitChange::Kind::kRemoved);
}

DiffThreshold threshold(DiffThreshold::Kind kind, std::optional<double> percent = {},
                        std::optional<int64_t> bytes = {}) {
  DiffThreshold t;
  t.kind = kind;
  t.percent = percent;
  t.bytes = bytes;
  return t;
}

TEST(PlanDiffThreshold, MemoryIncreaseTripsOnlyAboveThePercentage) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  // +18% of the per-rank total, all in slots.
  b.memory.slot_bytes += plan_totals(a).per_rank_bytes * 18 / 100;
  const PlanDiff diff = diff_plans(a, b);
  const auto results = check_thresholds(
      diff, {threshold(DiffThreshold::Kind::kMemoryIncrease, 5.0),
             threshold(DiffThreshold::Kind::kMemoryIncrease, 20.0),
             threshold(DiffThreshold::Kind::kMemoryIncrease, std::nullopt, int64_t{1} << 20),
             threshold(DiffThreshold::Kind::kCommIncrease, 0.0)});
  EXPECT_TRUE(results[0].tripped);
  EXPECT_FALSE(results[1].tripped);
  EXPECT_FALSE(results[2].tripped);  // +18% is far less than 1 MiB here
  EXPECT_FALSE(results[3].tripped);
  EXPECT_NEAR(*percent_change(results[0].old_value, results[0].new_value), 18.0, 0.01);
}

TEST(PlanDiffThreshold, DecreaseNeverTripsAnIncreaseThreshold) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  b.memory.sharded_param_bytes /= 2;
  const auto results =
      check_thresholds(diff_plans(a, b), {threshold(DiffThreshold::Kind::kMemoryIncrease, 0.0)});
  EXPECT_FALSE(results[0].tripped);
}

TEST(PlanDiffThreshold, ChangeThresholdsCountTheirCategory) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  fold_into(b, "layers.1", "<root>");
  const PlanDiff diff = diff_plans(a, b);
  DiffThreshold warnings = threshold(DiffThreshold::Kind::kDiagnosticsAdded);
  warnings.min_severity = "warning";
  const auto results =
      check_thresholds(diff, {threshold(DiffThreshold::Kind::kUnitsChanged),
                              threshold(DiffThreshold::Kind::kOwnershipChanged),
                              threshold(DiffThreshold::Kind::kOrderChanged),
                              threshold(DiffThreshold::Kind::kMeshChanged), warnings});
  EXPECT_TRUE(results[0].tripped);
  EXPECT_EQ(results[0].changes, 1);
  EXPECT_TRUE(results[1].tripped);
  EXPECT_TRUE(results[2].tripped);
  EXPECT_EQ(results[2].changes, 2);
  EXPECT_FALSE(results[3].tripped);
  EXPECT_FALSE(results[4].tripped);
}

TEST(PlanDiffThreshold, NamesRoundTrip) {
  for (const std::string& name : threshold_names()) {
    ASSERT_TRUE(threshold_kind(name)) << name;
  }
  EXPECT_FALSE(threshold_kind("memory"));
  EXPECT_TRUE(threshold_takes_amount(*threshold_kind("comm-increase")));
  EXPECT_FALSE(threshold_takes_amount(*threshold_kind("units-changed")));
}

}  // namespace
}  // namespace mfsdp::schema

namespace mfsdp::schema {
namespace {

TEST(PlanDiff, TrainingChangesAreFieldsByKey) {
  const Plan a = golden("tied_lm");
  Plan b = a;
  b.training = Training{};
  b.training->lr = 0.001;
  b.training->steps = 10;
  const PlanDiff diff = diff_plans(a, b);
  EXPECT_EQ(fields_of(diff), (std::vector<std::string>{"training.lr", "training.steps"}));
  EXPECT_EQ(diff.fields[0].old_value, "null");
  EXPECT_EQ(diff.fields[0].new_value, "0.001");
  Plan c = b;
  c.training->steps = 20;
  EXPECT_EQ(fields_of(diff_plans(b, c)), std::vector<std::string>{"training.steps"});
}

}  // namespace
}  // namespace mfsdp::schema
