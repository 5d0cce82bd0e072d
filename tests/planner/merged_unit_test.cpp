// Merged units (fully_shard of several modules, FSDP2's fully_shard([a, b])): one unit made of
// adjacent modules, gathered once for all of them.
#include <algorithm>

#include <gtest/gtest.h>

#include "planner/sharding_scope.h"
#include "planner/unit_selector.h"
#include "schema/plan_check.h"
#include "tests/planner/ir_builder.h"
#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

using testing::IrBuilder;
using Names = std::vector<std::string>;

schema::Mesh mesh_of(int64_t world) {
  return {world, world, 1};
}

// "" > layers > layers.0, layers.1, layers.2 (Block > fc), head; forward calls the layers in
// order, then head.
IrBuilder three_layers() {
  IrBuilder b;
  b.module("layers", "ModuleList");
  for (const char* layer : {"layers.0", "layers.1", "layers.2"}) {
    b.module(layer, "Block").module(std::string(layer) + ".fc", "Linear");
    b.param(std::string(layer) + ".fc", "weight", {4, 4});
  }
  b.module("head", "Linear");
  b.param("head", "weight", {2, 4});
  return b;
}

ShardedModel called_in_order() {
  IrBuilder b = three_layers();
  for (const char* layer : {"layers.0", "layers.1", "layers.2"}) {
    b.enter(layer).call(std::string(layer) + ".fc").exit(layer);
  }
  b.call("head");
  return b.model();
}

// Plans `model` with one fully_shard call per entry of `units`, in order.
schema::Plan plan_of(ShardedModel model, const std::vector<Names>& units) {
  ShardingScope scope(model, mesh_of(2), {});
  for (const Names& unit : units) scope.fully_shard(unit);
  return scope.finalize();
}

int count_of(const std::vector<std::string>& names, const std::string& name) {
  return static_cast<int>(std::count(names.begin(), names.end(), name));
}

TEST(MergedUnit, IsOneUnitGatheredOnceForItsModules) {
  ShardedModel model = called_in_order();
  ShardingScope scope(model, mesh_of(2), {});
  scope.fully_shard(Names{"layers.1", "layers.0"});  // any order: definition order in the plan
  scope.fully_shard("layers.2");
  scope.fully_shard("<root>");
  const schema::Plan plan = scope.finalize();
  EXPECT_TRUE(schema::check_plan(plan).empty());

  const schema::Unit& merged = unit(plan, "layers.0+layers.1");
  EXPECT_EQ(merged.modules, (Names{"layers.0", "layers.1"}));
  EXPECT_EQ(merged.type, "Block+Block");
  EXPECT_EQ(merged.parent, std::optional<std::string>("<root>"));
  EXPECT_EQ(merged.call_count, 1);
  ASSERT_EQ(merged.groups.size(), 1u);
  Names params;
  for (const schema::ParamLayout& p : merged.groups[0].params) params.push_back(p.name);
  EXPECT_EQ(params, (Names{"layers.0.fc.weight", "layers.1.fc.weight"}));
  EXPECT_EQ(merged.unsharded_bytes, 2 * 16 * 4);
  EXPECT_EQ(plan.forward_order, (Names{"<root>", "layers.0+layers.1", "layers.2"}));
  EXPECT_EQ(plan.backward_order, (Names{"<root>", "layers.2", "layers.0+layers.1"}));

  // One all-gather and one reduce-scatter per microbatch for both modules, against two each
  // when they are units of their own.
  int gathers = 0, scatters = 0;
  for (const schema::ScheduleEntry& e : plan.schedule) {
    gathers += count_of(e.all_gather, merged.name);
    scatters += count_of(e.reduce_scatter, merged.name);
  }
  EXPECT_EQ(gathers, 2);  // forward, and again for backward
  EXPECT_EQ(scatters, 1);
  const schema::Plan apart =
      plan_of(called_in_order(), {{"layers.0"}, {"layers.1"}, {"layers.2"}, {"<root>"}});
  EXPECT_EQ(apart.communication.all_gather_count, plan.communication.all_gather_count + 2);
}

TEST(MergedUnit, ItsModulesMayRunInAnyOrderWhenNothingRunsBetween) {
  IrBuilder b = three_layers();
  for (const char* layer : {"layers.2", "layers.0", "layers.1"}) {
    b.enter(layer).call(std::string(layer) + ".fc").exit(layer);
  }
  b.call("head");
  const schema::Plan plan =
      plan_of(b.model(), {{"layers.0", "layers.2"}, {"layers.1"}, {"<root>"}});
  EXPECT_EQ(plan.forward_order, (Names{"<root>", "layers.0+layers.2", "layers.1"}));
}

TEST(MergedUnit, RefusesModulesThatDoNotRunOneAfterAnother) {
  EXPECT_MFSDP_ERROR(
      plan_of(called_in_order(), {{"layers.0", "layers.2"}, {"layers.1"}, {"<root>"}}),
      ExitCode::kPlanning,
      "the modules of merged unit 'layers.0+layers.2' do not run one after "
      "another in forward (unit 'layers.1' runs between them)");
}

TEST(MergedUnit, RefusesAModuleCalledTwiceOrUnderAnIf) {
  IrBuilder twice = three_layers();
  twice.enter("layers.0").exit("layers.0").enter("layers.1").exit("layers.1");
  twice.enter("layers.0").exit("layers.0");
  EXPECT_MFSDP_ERROR(plan_of(twice.model(), {{"layers.0", "layers.1"}, {"<root>"}}),
                     ExitCode::kPlanning,
                     "module 'layers.0' of merged unit 'layers.0+layers.1' is called more "
                     "than once in forward");
  IrBuilder under_if = three_layers();
  under_if.enter("layers.0").exit("layers.0").enter("layers.1", /*under_if=*/true);
  under_if.exit("layers.1");
  EXPECT_MFSDP_ERROR(plan_of(under_if.model(), {{"layers.0", "layers.1"}, {"<root>"}}),
                     ExitCode::kPlanning, "is called under an if");
}

TEST(MergedUnit, RefusesWhatCannotBeMerged) {
  ShardedModel model = called_in_order();
  ShardingScope scope(model, mesh_of(2), {});
  EXPECT_MFSDP_ERROR(scope.fully_shard(Names{"layers.0", "<root>"}), ExitCode::kPlanning,
                     "the model cannot be merged with other modules");
  EXPECT_MFSDP_ERROR(scope.fully_shard(Names{"layers.0", "layers.0.fc"}), ExitCode::kPlanning,
                     "'layers.0' and 'layers.0.fc' are the same module or one holds the other");
  EXPECT_MFSDP_ERROR(scope.fully_shard(Names{"layers.0", "layers.9"}), ExitCode::kPlanning,
                     "the model has no module 'layers.9'");
  UnitOptions checkpoint;
  checkpoint.checkpoint = true;
  EXPECT_MFSDP_ERROR(scope.fully_shard(Names{"layers.0", "layers.1"}, checkpoint),
                     ExitCode::kPlanning, "a merged unit cannot be checkpointed");
  scope.fully_shard("layers.1");
  EXPECT_MFSDP_ERROR(scope.fully_shard(Names{"layers.0", "layers.1"}), ExitCode::kPlanning,
                     "module layers.1 is already a unit");
  // Nothing of a refused call stays registered: layers.0 can still be a unit.
  scope.fully_shard(Names{"layers.0", "head"});
}

TEST(MergedUnit, RefusesModulesOfDifferentUnitsAndUnitsInside) {
  EXPECT_MFSDP_ERROR(plan_of(called_in_order(), {{"layers.0", "head"}, {"layers"}, {"<root>"}}),
                     ExitCode::kPlanning,
                     "the modules of merged unit 'layers.0+head' lie in different units");
  EXPECT_MFSDP_ERROR(
      plan_of(called_in_order(), {{"layers.0", "layers.1"}, {"layers.0.fc"}, {"<root>"}}),
      ExitCode::kPlanning, "merged unit 'layers.0+layers.1' contains unit 'layers.0.fc'");
}

TEST(MergedUnit, APathPatternJoinedByPlusSelectsOneUnit) {
  const ShardedModel model = called_in_order();
  const ModelIR& ir = model.ir();
  using Kind = UnitSelector::Kind;
  const std::vector<std::vector<int>> units =
      select_units(ir, {{Kind::kPath, "layers.2+layers.0"}, {Kind::kPath, "layers.1"}});
  ASSERT_EQ(units.size(), 2u);
  EXPECT_EQ(module_paths(ir, units[0]), (Names{"layers.0", "layers.2"}));
  EXPECT_EQ(module_paths(ir, units[1]), (Names{"layers.1"}));
  // Globs work in each part; a part that matches nothing is named.
  EXPECT_EQ(select_units(ir, {{Kind::kPath, "layers.*+head"}}).front().size(), 4u);
  EXPECT_MFSDP_ERROR(select_units(ir, {{Kind::kPath, "layers.0+layer.1"}}), ExitCode::kPlanning,
                     "--unit 'layers.0+layer.1': its part 'layer.1' matches no module");
  // --keep-after-forward and --checkpoint pick a merged unit by any of its modules.
  const auto keep = unit_reshard_after_forward(ir, units, {}, {{Kind::kPath, "layers.2"}});
  EXPECT_EQ(keep[0], std::optional<bool>(false));
  EXPECT_FALSE(keep[1].has_value());
}

TEST(MergedUnit, ThePlanCheckRefusesMalformedMergedUnits) {
  const schema::Plan plan =
      plan_of(called_in_order(), {{"layers.0", "layers.1"}, {"layers.2"}, {"<root>"}});
  const auto problems_of = [](const schema::Plan& p) {
    std::vector<std::string> out;
    for (const schema::Problem& problem : schema::check_plan(p)) {
      out.push_back(problem.path + " " + problem.message);
    }
    return out;
  };
  const auto has = [](const std::vector<std::string>& problems, const std::string& text) {
    return std::any_of(problems.begin(), problems.end(),
                       [&](const std::string& p) { return p.find(text) != std::string::npos; });
  };
  schema::Plan renamed = plan;
  for (schema::Unit& u : renamed.units) {
    if (!u.modules.empty()) u.modules = {"layers.0", "layers.2"};
  }
  auto problems = problems_of(renamed);
  EXPECT_TRUE(has(problems,
                  "units[1].name is 'layers.0+layers.1', but its modules name it "
                  "'layers.0+layers.2'"))
      << ::testing::PrintToString(problems);

  schema::Plan checkpointed = plan;
  for (schema::Unit& u : checkpointed.units) u.checkpoint = !u.modules.empty();
  problems = problems_of(checkpointed);
  EXPECT_TRUE(has(problems, "checkpoint is true for a merged unit"))
      << ::testing::PrintToString(problems);

  schema::Plan one = plan;
  for (schema::Unit& u : one.units) {
    if (!u.modules.empty()) u.modules = {"layers.0"};
  }
  problems = problems_of(one);
  EXPECT_TRUE(has(problems, "lists one module")) << ::testing::PrintToString(problems);
}

}  // namespace
}  // namespace mfsdp::planner
