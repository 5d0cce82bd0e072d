// Planning the committed fixture models end to end: orders written out by hand from each
// fixture's source (tests/fixtures/make_fixtures.py), determinism, and the golden plans.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "planner/sharding_scope.h"
#include "schema/plan_check.h"
#include "schema/plan_json.h"
#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

using Names = std::vector<std::string>;

schema::Plan plan_fixture(const std::string& name, const Names& units, int64_t world = 2,
                          schema::Policy policy = {}) {
  const std::string relative = "tests/fixtures/" + name;
  ShardedModel loaded = ShardedModel::load(std::string(MFSDP_SOURCE_DIR) + "/" + relative);
  // Record the path as a user in the repository root would type it, as the goldens do.
  ShardedModel model(loaded.ir(), relative, loaded.info().sha256);
  ShardingScope scope(model, {world, world, 1}, policy);
  for (const auto& u : units) scope.fully_shard(u);
  return scope.finalize();
}

TEST(FixturePlans, GptOrdersPutRootFirstAndEmbeddingHeadInRoot) {
  const schema::Plan plan = plan_fixture("tied_lm.pt", {"layers.0", "layers.1", "<root>"});
  EXPECT_EQ(plan.forward_order, (Names{"<root>", "layers.0", "layers.1"}));
  EXPECT_EQ(plan.backward_order, (Names{"<root>", "layers.1", "layers.0"}));
  EXPECT_EQ(plan.roots, Names{"<root>"});
  const schema::Unit& root = plan.units[0];
  ASSERT_EQ(root.groups.size(), 1u);
  EXPECT_EQ(root.groups[0].params.front().name, "wte.weight");
  EXPECT_EQ(root.groups[0].params.front().aliases, Names{"lm_head.weight"});
  EXPECT_EQ(root.groups[0].params.back().name, "ln_f.bias");
  EXPECT_TRUE(schema::check_plan(plan).empty());
}

TEST(FixturePlans, TiedEmbeddingAndHeadUnitsHoistTheWeightToTheRoot) {
  const schema::Plan plan =
      plan_fixture("tied_lm.pt", {"wte", "lm_head", "layers.0", "layers.1", "<root>"});
  EXPECT_EQ(plan.forward_order, (Names{"<root>", "wte", "layers.0", "layers.1", "lm_head"}));
  EXPECT_EQ(plan.backward_order, (Names{"<root>", "lm_head", "layers.1", "layers.0", "wte"}));
  EXPECT_EQ(diagnostic_codes(plan),
            (Names{"ownership.hoisted wte.weight", "unit.empty wte", "unit.empty lm_head"}));
}

TEST(FixturePlans, FunctionalHeadReadNeedsTheRootUnit) {
  EXPECT_MFSDP_ERROR(
      plan_fixture("functional_head.pt", {"wte", "layers.0", "layers.1", "ln_f", "wpe"}),
      ExitCode::kPlanning,
      "parameter wte.weight (owned by unit wte) is read by <root> outside every "
      "unit");
  const schema::Plan plan =
      plan_fixture("functional_head.pt", {"wte", "layers.0", "layers.1", "<root>"});
  EXPECT_EQ(diagnostic_codes(plan)[0], "ownership.hoisted wte.weight");
}

TEST(FixturePlans, ReorderedModelFollowsCallsThroughForwardImpl) {
  const schema::Plan plan =
      plan_fixture("reordered.pt", {"head", "blocks.0", "blocks.1", "blocks.2", "stem"});
  EXPECT_EQ(plan.forward_order, (Names{"stem", "blocks.2", "blocks.0", "blocks.1", "head"}));
  EXPECT_EQ(plan.backward_order, (Names{"head", "blocks.1", "blocks.0", "blocks.2", "stem"}));
  // Definition order is head, blocks.0, blocks.1, blocks.2, stem.
  EXPECT_EQ(diagnostic_codes(plan),
            (Names{"order.differs_from_definition stem", "order.differs_from_definition blocks.2",
                   "order.differs_from_definition head"}));
}

TEST(FixturePlans, SharedModuleCalledTwiceKeepsOneUnit) {
  const schema::Plan plan = plan_fixture("called_twice.pt", {"inp", "shared", "mid", "out"});
  EXPECT_EQ(plan.forward_order, (Names{"inp", "shared", "mid", "out"}));
  EXPECT_EQ(plan.backward_order, (Names{"out", "shared", "mid", "inp"}));
  EXPECT_EQ(plan.units[1].name, "shared");
  EXPECT_EQ(plan.units[1].call_count, 2);
  EXPECT_TRUE(schema::check_plan(plan).empty());
}

TEST(FixturePlans, OnlyCallsUnderTheModelsIfAndLoopAreFlagged) {
  const schema::Plan plan =
      plan_fixture("conditional.pt", {"pre", "branch_a", "branch_b", "post", "refine", "<root>"});
  EXPECT_EQ(plan.forward_order, (Names{"<root>", "pre", "branch_a", "branch_b", "post", "refine"}));
  EXPECT_EQ(diagnostic_codes(plan), (Names{"unit.conditional branch_a", "unit.conditional branch_b",
                                           "unit.in_loop refine", "unit.empty <root>"}));
  for (const auto& u : plan.units) {
    EXPECT_EQ(u.conditional, u.name == "branch_a" || u.name == "branch_b") << u.name;
  }
}

// Loops with a constant trip count are unrolled: each turn is a call, nothing is flagged.
TEST(FixturePlans, ABlockLoopedAConstantNumberOfTimesIsCalledThatOften) {
  const schema::Plan plan = plan_fixture("looped_lm.pt", {"block", "<root>"});
  EXPECT_EQ(plan.forward_order, (Names{"<root>", "block"}));
  EXPECT_EQ(plan.backward_order, (Names{"<root>", "block"}));
  EXPECT_EQ(unit(plan, "block").call_count, 3);
  EXPECT_FALSE(unit(plan, "block").repeated);
  EXPECT_EQ(diagnostic_codes(plan), (Names{"unit.called_multiple_times block"}));
  int64_t block_forwards = 0;
  for (const auto& e : plan.schedule) {
    block_forwards += e.unit == "block" && e.point == "pre_forward";
  }
  EXPECT_EQ(block_forwards, 3);
  EXPECT_TRUE(schema::check_plan(plan).empty());
}

TEST(FixturePlans, NestedLoopsAndLoopsOverAConstantListAreUnrolled) {
  const schema::Plan plan =
      plan_fixture("constant_loops.pt", {"inp", "a", "b", "c", "out", "<root>"});
  // Calls: inp, (a, b) x2, c x4, b x2, out; backward goes by last calls, reversed.
  EXPECT_EQ(plan.forward_order, (Names{"<root>", "inp", "a", "b", "c", "out"}));
  EXPECT_EQ(plan.backward_order, (Names{"<root>", "out", "b", "c", "a", "inp"}));
  for (const auto& [name, calls] :
       std::vector<std::pair<std::string, int64_t>>{{"inp", 1}, {"a", 2}, {"b", 4}, {"c", 4}}) {
    EXPECT_EQ(unit(plan, name).call_count, calls) << name;
    EXPECT_FALSE(unit(plan, name).repeated) << name;
  }
  for (const auto& code : diagnostic_codes(plan)) {
    EXPECT_EQ(code.find("unit.in_loop"), std::string::npos) << code;
  }
  EXPECT_TRUE(schema::check_plan(plan).empty());
}

TEST(FixturePlans, ADataDependentWhileLoopStaysFlagged) {
  const schema::Plan plan = plan_fixture("while_loop.pt", {"inp", "step", "out", "<root>"});
  EXPECT_EQ(unit(plan, "step").call_count, 1);
  EXPECT_TRUE(unit(plan, "step").repeated);
  EXPECT_EQ(diagnostic_codes(plan), (Names{"unit.in_loop step", "unit.empty <root>"}));
}

TEST(FixturePlans, MixedDtypesFrozenParametersAndBuffersGroupSeparately) {
  const schema::Plan plan =
      plan_fixture("mixed.pt", {"embed", "proj", "proj64", "bn", "<root>"}, 3);
  const schema::Unit& root = plan.units[0];
  ASSERT_EQ(root.groups.size(), 1u);
  EXPECT_EQ(root.groups[0].dtype, "float16");
  EXPECT_EQ(root.groups[0].padded_numel, 24);  // 7 halves, 3 ranks x 8-element alignment
  EXPECT_EQ(root.buffers.size(), 2u);
  EXPECT_FALSE(plan.units[1].groups[0].requires_grad);
  EXPECT_EQ(plan.units[3].groups[0].dtype, "float64");
  EXPECT_EQ(plan.units[4].buffers.size(), 3u);
  EXPECT_EQ(plan.communication.reduce_scatter_count, 4);  // embed is frozen
  EXPECT_TRUE(schema::check_plan(plan).empty());
}

TEST(FixturePlans, TwoRootsShareOneSchedule) {
  const schema::Plan plan = plan_fixture("two_roots.pt", {"encoder", "decoder"});
  EXPECT_EQ(plan.roots, (Names{"encoder", "decoder"}));
  EXPECT_EQ(plan.schedule[0].all_gather, (Names{"encoder", "decoder"}));
  EXPECT_EQ(plan.backward_order, (Names{"decoder", "encoder"}));
  EXPECT_TRUE(plan.units[1].kept_after_forward);
  EXPECT_TRUE(schema::check_plan(plan).empty());
}

TEST(FixturePlans, PlanningTwiceGivesIdenticalBytes) {
  const Names units = {"layers.0", "layers.1", "<root>"};
  EXPECT_EQ(schema::dump_plan(plan_fixture("tied_lm.pt", units)),
            schema::dump_plan(plan_fixture("tied_lm.pt", units)));
}

}  // namespace
}  // namespace mfsdp::planner
