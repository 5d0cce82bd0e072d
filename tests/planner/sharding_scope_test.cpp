#include "planner/sharding_scope.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "tests/planner/ir_builder.h"
#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

using testing::chain_model;
using testing::IrBuilder;

schema::Mesh mesh_of(int64_t world) {
  return {world, world, 1};
}

ShardedModel nested_model() {
  IrBuilder b;
  b.module("layers", "ModuleList").module("layers.0", "Block").module("layers.1", "Block");
  b.module("head");
  b.param("layers.0", "w", {8});
  b.param("layers.1", "w", {8});
  b.param("head", "w", {8});
  b.enter("layers.0").exit("layers.0").enter("layers.1").exit("layers.1").call("head");
  return b.model();
}

TEST(ShardingScope, FullyShardWithoutActiveScopeFails) {
  EXPECT_MFSDP_ERROR(fully_shard("layers.0"), ExitCode::kPlanning, "outside a sharding scope");
}

TEST(ShardingScope, FreeFullyShardRegistersOnActiveScope) {
  ShardedModel model = nested_model();
  ShardingScope scope(model, mesh_of(2), {});
  fully_shard("layers.0");
  fully_shard("<root>");
  EXPECT_EQ(scope.units(), (std::vector<std::vector<int>>{{2}, {0}}));
}

TEST(ShardingScope, CheckpointIsAPerUnitChoiceOfFullyShard) {
  ShardedModel model = nested_model();
  ShardingScope scope(model, mesh_of(2), {});
  scope.fully_shard("layers.0", {/*checkpoint=*/true, /*reshard_after_forward=*/std::nullopt});
  fully_shard("layers.1");
  scope.fully_shard("<root>");
  const schema::Plan plan = scope.finalize();
  for (const schema::Unit& unit : plan.units) {
    EXPECT_EQ(unit.checkpoint, unit.name == "layers.0") << unit.name;
  }
}

// Whether `unit` is gathered in backward and resharded after its forward, by the schedule.
struct Gathers {
  bool resharded_in_forward = false;
  bool gathered_in_backward = false;
};
Gathers gathers_of(const schema::Plan& plan, const std::string& unit) {
  Gathers g;
  for (const schema::ScheduleEntry& e : plan.schedule) {
    const auto has = [&](const std::vector<std::string>& names) {
      return std::find(names.begin(), names.end(), unit) != names.end();
    };
    if (e.phase == "forward" && has(e.reshard)) g.resharded_in_forward = true;
    if (e.phase == "backward" && has(e.all_gather)) g.gathered_in_backward = true;
  }
  return g;
}

TEST(ShardingScope, ReshardAfterForwardIsAPerUnitChoiceOfFullyShard) {
  ShardedModel model = nested_model();
  ShardingScope scope(model, mesh_of(2), {});  // the policy reshards after forward
  UnitOptions keep;
  keep.reshard_after_forward = false;
  scope.fully_shard("layers.0", keep);
  scope.fully_shard("layers.1");
  scope.fully_shard("<root>");
  const schema::Plan plan = scope.finalize();
  // layers.0 stays gathered from its forward to its backward: one all-gather less.
  EXPECT_FALSE(gathers_of(plan, "layers.0").resharded_in_forward);
  EXPECT_FALSE(gathers_of(plan, "layers.0").gathered_in_backward);
  EXPECT_TRUE(gathers_of(plan, "layers.1").resharded_in_forward);
  EXPECT_TRUE(gathers_of(plan, "layers.1").gathered_in_backward);
  for (const schema::Unit& unit : plan.units) {
    // The root is backward's first unit: kept whatever the choice.
    EXPECT_EQ(unit.kept_after_forward, unit.name != "layers.1") << unit.name;
  }
}

TEST(ShardingScope, AUnitMayReshardWhereThePolicyKeeps) {
  ShardedModel model = nested_model();
  schema::Policy policy;
  policy.reshard_after_forward = false;
  ShardingScope scope(model, mesh_of(2), policy);
  scope.fully_shard("layers.0");
  UnitOptions reshard;
  reshard.reshard_after_forward = true;
  scope.fully_shard("layers.1", reshard);
  scope.fully_shard("<root>");
  const schema::Plan plan = scope.finalize();
  EXPECT_FALSE(gathers_of(plan, "layers.0").gathered_in_backward);
  EXPECT_TRUE(gathers_of(plan, "layers.1").resharded_in_forward);
  EXPECT_TRUE(gathers_of(plan, "layers.1").gathered_in_backward);
  // Memory follows: keeping layers.0 holds its slot through backward; a plan that reshards it
  // too needs no more at its peak.
  ShardedModel again = nested_model();
  ShardingScope all_reshard(again, mesh_of(2), {});
  all_reshard.fully_shard("layers.0");
  all_reshard.fully_shard("layers.1");
  all_reshard.fully_shard("<root>");
  EXPECT_LE(all_reshard.finalize().memory.peak_unsharded_bytes, plan.memory.peak_unsharded_bytes);
}

TEST(ShardingScope, RejectsACheckpointedUnitThatContainsAnother) {
  ShardedModel model = nested_model();
  ShardingScope scope(model, mesh_of(2), {});
  scope.fully_shard("layers.0");
  scope.fully_shard("<root>", {/*checkpoint=*/true, /*reshard_after_forward=*/std::nullopt});
  EXPECT_MFSDP_ERROR(scope.finalize(), ExitCode::kPlanning,
                     "unit '<root>' is checkpointed but contains unit 'layers.0'; checkpoint "
                     "units that hold no other unit (e.g. 'layers.0')");
}

TEST(ShardingScope, RejectsNestedScope) {
  ShardedModel model = nested_model();
  ShardingScope outer(model, mesh_of(2), {});
  EXPECT_MFSDP_ERROR(ShardingScope(model, mesh_of(2), {}), ExitCode::kPlanning,
                     "does not support nesting");
}

TEST(ShardingScope, NewScopeAllowedAfterFinalize) {
  ShardedModel model = nested_model();
  {
    ShardingScope first(model, mesh_of(2), {});
    first.fully_shard("layers.0");
    first.finalize();
  }
  ShardingScope second(model, mesh_of(2), {});
  second.fully_shard("layers.1");
  EXPECT_EQ(ShardingScope::active(), &second);
}

TEST(ShardingScope, RejectsShardingAUnitTwice) {
  ShardedModel model = nested_model();
  ShardingScope scope(model, mesh_of(2), {});
  scope.fully_shard("layers.0");
  EXPECT_MFSDP_ERROR(scope.fully_shard("layers.0"), ExitCode::kPlanning,
                     "module layers.0 is already a unit (registered in this scope)");
}

TEST(ShardingScope, RejectsShardingAUnitOfAnEarlierScope) {
  ShardedModel model = nested_model();
  {
    ShardingScope first(model, mesh_of(2), {});
    first.fully_shard("layers.0");
    first.finalize();
  }
  ShardingScope second(model, mesh_of(2), {});
  EXPECT_MFSDP_ERROR(second.fully_shard("layers.0"), ExitCode::kPlanning,
                     "already a unit (registered in scope #1)");
}

TEST(ShardingScope, RejectsModuleContainingUnitOfAnotherScopeNamingBoth) {
  ShardedModel model = nested_model();
  {
    ShardingScope first(model, mesh_of(2), {});
    first.fully_shard("layers.1");
    first.finalize();
  }
  ShardingScope second(model, mesh_of(2), {});
  EXPECT_MFSDP_ERROR(second.fully_shard("layers"), ExitCode::kPlanning,
                     "module layers contains layers.1, a unit registered in scope #1");
  EXPECT_MFSDP_ERROR(second.fully_shard("<root>"), ExitCode::kPlanning,
                     "module <root> contains layers.1");
}

TEST(ShardingScope, RejectsModuleInsideUnitOfAnotherScope) {
  IrBuilder b;
  b.module("block").module("block.inner");
  b.param("block.inner", "w", {4});
  b.call("block");
  ShardedModel model = b.model();
  {
    ShardingScope first(model, mesh_of(1), {});
    first.fully_shard("block");
    first.finalize();
  }
  ShardingScope second(model, mesh_of(1), {});
  EXPECT_MFSDP_ERROR(second.fully_shard("block.inner"), ExitCode::kPlanning,
                     "module block.inner is inside block, a unit registered in scope #1");
}

TEST(ShardingScope, AbandonedScopeForgetsItsUnits) {
  ShardedModel model = nested_model();
  {
    ShardingScope abandoned(model, mesh_of(2), {});
    abandoned.fully_shard("layers.0");
  }
  EXPECT_EQ(ShardingScope::active(), nullptr);
  ShardingScope scope(model, mesh_of(2), {});
  scope.fully_shard("layers.0");
  EXPECT_EQ(model.unit_scope(2), 2);
}

TEST(ShardingScope, RejectsFullyShardAfterFinalize) {
  ShardedModel model = nested_model();
  ShardingScope scope(model, mesh_of(2), {});
  scope.fully_shard("<root>");
  scope.finalize();
  EXPECT_MFSDP_ERROR(scope.fully_shard("layers.0"), ExitCode::kPlanning,
                     "after the scope was finalized");
  EXPECT_MFSDP_ERROR(fully_shard("layers.0"), ExitCode::kPlanning, "outside a sharding scope");
}

TEST(ShardingScope, RejectsFinalizeTwice) {
  ShardedModel model = nested_model();
  ShardingScope scope(model, mesh_of(2), {});
  scope.fully_shard("<root>");
  scope.finalize();
  EXPECT_MFSDP_ERROR(scope.finalize(), ExitCode::kPlanning, "finalize() called twice");
}

TEST(ShardingScope, RejectsFinalizeWithoutUnits) {
  ShardedModel model = nested_model();
  ShardingScope scope(model, mesh_of(2), {});
  EXPECT_MFSDP_ERROR(scope.finalize(), ExitCode::kPlanning, "registered no units");
}

TEST(ShardingScope, RejectsUnknownModulePath) {
  ShardedModel model = nested_model();
  ShardingScope scope(model, mesh_of(2), {});
  EXPECT_MFSDP_ERROR(scope.fully_shard("layers.7"), ExitCode::kPlanning,
                     "the model has no module 'layers.7'");
}

TEST(ShardingScope, RejectsBadMeshAndPolicy) {
  ShardedModel model = nested_model();
  EXPECT_MFSDP_ERROR(ShardingScope(model, {0, 0, 1}, {}), ExitCode::kPlanning,
                     "mesh.world_size 0 is invalid");
  EXPECT_MFSDP_ERROR(ShardingScope(model, {6, 2, 4}, {}), ExitCode::kPlanning,
                     "mesh.replicate_size 4 must be at least 1 and divide the world size 6");
  EXPECT_MFSDP_ERROR(ShardingScope(model, {int64_t{1} << 62, int64_t{1} << 62, 1}, {}),
                     ExitCode::kPlanning,
                     "mesh.world_size 4611686018427387904 is invalid; it must be from 1 to "
                     "2147483647");
  // (2^62 + 1) × 4 wraps to 4 in 64 bits: the world size, had it not been checked.
  EXPECT_MFSDP_ERROR(ShardingScope(model, {4, (int64_t{1} << 62) + 1, 4}, {}), ExitCode::kPlanning,
                     "mesh.world_size 4 is not shard_size 4611686018427387905 × "
                     "replicate_size 4");
  schema::Policy policy;
  policy.align_bytes = 24;
  EXPECT_MFSDP_ERROR(ShardingScope(model, mesh_of(2), policy), ExitCode::kPlanning,
                     "policy.align_bytes 24 is not a power of two");
  policy.align_bytes = int64_t{1} << 31;
  EXPECT_MFSDP_ERROR(ShardingScope(model, mesh_of(2), policy), ExitCode::kPlanning,
                     "policy.align_bytes 2147483648 is too large; it must be a power of two from "
                     "16 to 1073741824 (1 GiB)");
  policy = {};
  policy.param_dtype = "int8";
  EXPECT_MFSDP_ERROR(ShardingScope(model, mesh_of(2), policy), ExitCode::kPlanning,
                     "policy.param_dtype 'int8' is not a floating dtype");
}

TEST(ShardingScope, RootsAreOutermostUnitsInRegistrationOrder) {
  ShardedModel model = nested_model();
  ShardingScope scope(model, mesh_of(2), {});
  scope.fully_shard("head");
  scope.fully_shard("layers.1");
  scope.fully_shard("layers.0");
  scope.fully_shard("layers");
  const schema::Plan plan = scope.finalize();
  EXPECT_EQ(plan.roots, (std::vector<std::string>{"head", "layers"}));
  ASSERT_EQ(plan.units.size(), 4u);
  EXPECT_EQ(plan.units[0].name, "layers");
  EXPECT_EQ(plan.units[1].parent, std::optional<std::string>("layers"));
  EXPECT_FALSE(plan.units[1].root);
  EXPECT_TRUE(plan.units[3].root);
}

TEST(ShardingScope, ModelItselfIsNamedRoot) {
  ShardedModel model = nested_model();
  ShardingScope scope(model, mesh_of(2), {});
  scope.fully_shard("");
  scope.fully_shard("head");
  const schema::Plan plan = scope.finalize();
  EXPECT_EQ(plan.roots, std::vector<std::string>{"<root>"});
  EXPECT_EQ(plan.units[1].parent, std::optional<std::string>("<root>"));
}

TEST(ShardingScope, PlanRecordsModelMeshAndPolicy) {
  ShardedModel model(chain_model({"a", "b"}, 10), "m.pt", "abc");
  schema::Policy policy;
  policy.forward_prefetch = 2;
  ShardingScope scope(model, {4, 2, 2}, policy);
  scope.fully_shard("a");
  scope.fully_shard("b");
  const schema::Plan plan = scope.finalize();
  EXPECT_EQ(plan.model.path, "m.pt");
  EXPECT_EQ(plan.model.sha256, "abc");
  EXPECT_EQ(plan.model.parameters, 2);
  EXPECT_EQ(plan.model.parameter_numel, 20);
  EXPECT_EQ(plan.mesh.shard_size, 2);
  EXPECT_EQ(plan.policy.forward_prefetch, 2);
  EXPECT_EQ(plan.schema, "mfsdp.plan/1");
}

}  // namespace
}  // namespace mfsdp::planner
