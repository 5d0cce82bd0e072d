#include <gtest/gtest.h>

#include "planner/sharding_scope.h"
#include "tests/planner/ir_builder.h"
#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

using testing::IrBuilder;
using Names = std::vector<std::string>;

schema::Plan plan_with(const IrBuilder& b, const Names& units) {
  ShardedModel model = b.model();
  ShardingScope scope(model, {2, 2, 1}, {});
  for (const auto& u : units) scope.fully_shard(u);
  return scope.finalize();
}

Names codes(const schema::Plan& plan, const std::string& code) {
  Names where;
  for (const auto& d : plan.diagnostics) {
    if (d.code == code) where.push_back(d.where);
  }
  return where;
}

IrBuilder with_params(IrBuilder b, const Names& modules) {
  for (const auto& m : modules) b.param(m, "w", {4});
  return b;
}

TEST(UnitOrder, ForwardOrderFollowsCallsNotDefinition) {
  IrBuilder b;
  b.module("head").module("blocks").module("blocks.0").module("blocks.1").module("stem");
  b = with_params(b, {"head", "blocks.0", "blocks.1", "stem"});
  b.call("stem").call("blocks.1").call("blocks.0").call("head");
  const schema::Plan plan = plan_with(b, {"head", "blocks.0", "blocks.1", "stem"});
  EXPECT_EQ(plan.forward_order, (Names{"stem", "blocks.1", "blocks.0", "head"}));
  EXPECT_EQ(plan.backward_order, (Names{"head", "blocks.0", "blocks.1", "stem"}));
}

TEST(UnitOrder, DefinitionOrderDifferencesNameTheFewestMovedUnits) {
  IrBuilder b;
  b.module("head").module("blocks").module("blocks.0").module("blocks.1").module("stem");
  b = with_params(b, {"head", "blocks.0", "blocks.1", "stem"});
  b.call("stem").call("blocks.0").call("blocks.1").call("head");
  const schema::Plan plan = plan_with(b, {"head", "blocks.0", "blocks.1", "stem"});
  // Definition: head, blocks.0, blocks.1, stem. Execution keeps blocks.0 < blocks.1; stem and
  // head moved.
  EXPECT_EQ(codes(plan, "order.differs_from_definition"), (Names{"stem", "head"}));
  for (const auto& d : plan.diagnostics) {
    if (d.where == "stem" && d.code == "order.differs_from_definition") {
      EXPECT_EQ(d.message.rfind(
                    "unit stem runs at forward position 1 of 4 but is defined at position 4;", 0),
                0u);
    }
  }
}

TEST(UnitOrder, MatchingDefinitionOrderIsNotReported) {
  IrBuilder b;
  b.module("a").module("b");
  b = with_params(b, {"a", "b"});
  b.call("a").call("b");
  EXPECT_TRUE(codes(plan_with(b, {"b", "a"}), "order.differs_from_definition").empty());
}

TEST(UnitOrder, BackwardVisitsOuterUnitFirstThenInnerLastToFirst) {
  IrBuilder b;
  b.module("layers").module("layers.0").module("layers.1").module("head");
  b = with_params(b, {"", "layers.0", "layers.1", "head"});
  b.call("layers.0").call("layers.1").call("head");
  const schema::Plan plan = plan_with(b, {"layers.0", "layers.1", "head", "<root>"});
  EXPECT_EQ(plan.forward_order, (Names{"<root>", "layers.0", "layers.1", "head"}));
  EXPECT_EQ(plan.backward_order, (Names{"<root>", "head", "layers.1", "layers.0"}));
}

TEST(UnitOrder, UnitCalledTwiceIsCountedOnceInOrdersAndDiagnosed) {
  IrBuilder b;
  b.module("inp").module("shared").module("mid").module("out");
  b = with_params(b, {"inp", "shared", "mid", "out"});
  b.call("inp").call("shared").call("mid").call("shared").call("out");
  const schema::Plan plan = plan_with(b, {"inp", "shared", "mid", "out"});
  EXPECT_EQ(plan.forward_order, (Names{"inp", "shared", "mid", "out"}));
  // Backward starts from the last forward exit: out, then shared's second call.
  EXPECT_EQ(plan.backward_order, (Names{"out", "shared", "mid", "inp"}));
  EXPECT_EQ(unit(plan, "shared").call_count, 2);
  EXPECT_EQ(codes(plan, "unit.called_multiple_times"), Names{"shared"});
}

TEST(UnitOrder, IfAroundACallMarksTheUnitConditional) {
  IrBuilder b;
  b.module("a").module("b").module("c");
  b = with_params(b, {"a", "b", "c"});
  b.call("a", /*under_if=*/true).call("b", true).call("c");
  const schema::Plan plan = plan_with(b, {"a", "b", "c"});
  EXPECT_TRUE(unit(plan, "a").conditional);
  EXPECT_FALSE(unit(plan, "c").conditional);
  EXPECT_EQ(codes(plan, "unit.conditional"), (Names{"a", "b"}));
}

TEST(UnitOrder, LoopAroundACallMarksTheUnitRepeated) {
  IrBuilder b;
  b.module("a").module("refine");
  b = with_params(b, {"a", "refine"});
  b.call("a").call("refine", false, /*under_loop=*/true);
  const schema::Plan plan = plan_with(b, {"a", "refine"});
  EXPECT_TRUE(unit(plan, "refine").repeated);
  EXPECT_FALSE(unit(plan, "refine").conditional);
  EXPECT_EQ(codes(plan, "unit.in_loop"), Names{"refine"});
}

TEST(UnitOrder, UncalledUnitIsLeftOutOfOrdersAndWarned) {
  IrBuilder b;
  b.module("a").module("unused");
  b = with_params(b, {"a", "unused"});
  b.call("a");
  const schema::Plan plan = plan_with(b, {"a", "unused"});
  EXPECT_EQ(plan.forward_order, Names{"a"});
  EXPECT_EQ(unit(plan, "unused").call_count, 0);
  EXPECT_EQ(codes(plan, "unit.never_called"), Names{"unused"});
}

}  // namespace
}  // namespace mfsdp::planner
