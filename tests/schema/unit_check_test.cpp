// check_plan's unit rules: names, parents by module path, roots, call counts.

#include <gtest/gtest.h>

#include "sample_plan.h"
#include "schema/plan_check.h"

namespace mfsdp::schema {
namespace {

using Lines = std::vector<std::string>;

Lines check(const Plan& plan) {
  return problem_lines(check_plan(plan));
}

// A unit without parameters that is never called: it touches no other rule.
Unit idle_unit(const std::string& name, const std::string& parent) {
  Unit unit;
  unit.name = name;
  unit.parent = parent;
  return unit;
}

TEST(UnitCheck, RejectsDuplicateUnitName) {
  Plan plan = sample_plan();
  plan.units.push_back(idle_unit("layers.0", kRootName));
  EXPECT_EQ(check(plan), Lines{"units[3].name: duplicate unit name 'layers.0' (also units[1])"});
}

TEST(UnitCheck, RejectsEmptyUnitName) {
  Plan plan = sample_plan();
  plan.units.push_back(idle_unit("", kRootName));
  EXPECT_EQ(check(plan), Lines{"units[3].name: is empty"});
}

TEST(UnitCheck, RejectsParentThatIsNotAUnit) {
  Plan plan = sample_plan();
  plan.units[1].parent = "layers";
  EXPECT_EQ(check(plan), Lines{"units[1].parent: 'layers' is not a unit"});
}

TEST(UnitCheck, RejectsParentThatDoesNotEncloseTheUnit) {
  Plan plan = sample_plan();
  plan.units.push_back(idle_unit("head", kRootName));
  plan.units[1].parent = "head";
  EXPECT_EQ(check(plan),
            Lines{"units[1].parent: 'head' does not enclose 'layers.0' by module path"});
}

// A recompute re-runs the unit's forward without hooks, so nothing inside may be a unit.
TEST(UnitCheck, ACheckpointedUnitHoldsNoOtherUnit) {
  Plan plan = sample_plan();
  plan.units[1].checkpoint = true;  // layers.0: a leaf unit
  EXPECT_EQ(check(plan), Lines{});
  plan.units[0].checkpoint = true;  // <root>: holds layers.0 and layers.1
  EXPECT_EQ(check(plan), (Lines{"units[1].parent: '<root>' is checkpointed, so it cannot contain "
                                "unit 'layers.0'; checkpoint units that hold no other unit",
                                "units[2].parent: '<root>' is checkpointed, so it cannot contain "
                                "unit 'layers.1'; checkpoint units that hold no other unit"}));
}

TEST(UnitCheck, ParentIsAPathPrefixNotAStringPrefix) {
  Plan plan = sample_plan();
  plan.units.push_back(idle_unit("layers.10", kRootName));
  plan.units.push_back(idle_unit("layers.1.mlp", "layers.1"));
  EXPECT_EQ(check(plan), Lines{});
  plan.units[3].parent = "layers.1";
  EXPECT_EQ(check(plan),
            Lines{"units[3].parent: 'layers.1' does not enclose 'layers.10' by module path"});
}

TEST(UnitCheck, RejectsParentThatIsNotTheNearestEnclosingUnit) {
  Plan plan = sample_plan();
  plan.units.push_back(idle_unit("layers", kRootName));
  EXPECT_EQ(check(plan),
            (Lines{"units[1].parent: '<root>' is not the nearest enclosing unit; 'layers' is",
                   "units[2].parent: '<root>' is not the nearest enclosing unit; 'layers' is"}));
}

TEST(UnitCheck, RejectsMissingParentOfAnEnclosedUnit) {
  Plan plan = sample_plan();
  plan.units[1].parent.reset();
  EXPECT_EQ(check(plan), (Lines{"units[1].parent: is null, but unit '<root>' encloses 'layers.0'",
                                "units[1].root: is false, but the unit has no parent"}));
}

TEST(UnitCheck, RootMeansNoParent) {
  Plan plan = sample_plan();
  plan.units[1].root = true;
  EXPECT_EQ(check(plan), (Lines{"units[1].root: is true, but the unit has a parent",
                                "roots: is ['<root>'], expected the units with root true, in "
                                "registration order: ['<root>', 'layers.0']"}));
}

TEST(UnitCheck, RootUnitCannotHaveAParent) {
  Plan plan = sample_plan();
  plan.units[0].parent = "layers.0";
  plan.units[0].root = false;
  plan.roots.clear();
  EXPECT_EQ(check(plan),
            Lines{"units[0].parent: 'layers.0' does not enclose '<root>' by module path"});
}

TEST(UnitCheck, RootsListTheRootUnitsInOrder) {
  Plan plan = sample_plan();
  plan.roots = {};
  EXPECT_EQ(check(plan), Lines{"roots: is [], expected the units with root true, in "
                               "registration order: ['<root>']"});
}

TEST(UnitCheck, RootsKeepRegistrationOrderNotUnitsOrder) {
  Plan plan = sample_plan();
  plan.units[0].name = "encoder";
  plan.units.push_back(idle_unit("decoder", kRootName));
  plan.units.back().parent.reset();
  plan.units.back().root = true;
  plan.roots = {"decoder", "encoder"};
  for (auto& unit : plan.units) {
    if (unit.parent == std::optional<std::string>(kRootName)) unit.parent = "encoder";
  }
  for (const std::string& line : check(plan)) {
    EXPECT_EQ(line.rfind("roots:", 0), std::string::npos) << line;
  }
}

TEST(UnitCheck, SeveralRootsWithoutAModelUnit) {
  Plan plan = sample_plan();
  plan.units.push_back(idle_unit("encoder", kRootName));
  plan.units.push_back(idle_unit("decoder", kRootName));
  plan.units.back().parent.reset();
  plan.units.back().root = true;
  plan.units[3].parent.reset();
  plan.units[3].root = true;
  // With <root> a unit every other unit has an enclosing unit.
  EXPECT_EQ(check(plan),
            (Lines{"units[3].parent: is null, but unit '<root>' encloses 'encoder'",
                   "units[4].parent: is null, but unit '<root>' encloses 'decoder'",
                   "roots: is ['<root>'], expected the units with root true, in registration "
                   "order: ['<root>', 'decoder', 'encoder']"}));
}

TEST(UnitCheck, RejectsNegativeCallCount) {
  Plan plan = sample_plan();
  plan.units.push_back(idle_unit("head", kRootName));
  plan.units.back().call_count = -1;
  EXPECT_EQ(check(plan), Lines{"units[3].call_count: must be >= 0, got -1"});
}

}  // namespace
}  // namespace mfsdp::schema
