#include <gtest/gtest.h>

#include "planner/sharding_scope.h"
#include "tests/planner/ir_builder.h"
#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

using testing::IrBuilder;

schema::Plan plan_with(const ShardedModel& source, const std::vector<std::string>& units) {
  ShardedModel model = source;
  ShardingScope scope(model, {2, 2, 1}, {});
  for (const auto& u : units) scope.fully_shard(u);
  return scope.finalize();
}

std::vector<std::string> owned(const schema::Plan& plan, const std::string& unit) {
  std::vector<std::string> names;
  for (const auto& u : plan.units) {
    if (u.name != unit) continue;
    for (const auto& g : u.groups) {
      for (const auto& p : g.params) names.push_back(p.name);
    }
  }
  return names;
}

const schema::Diagnostic* find_diagnostic(const schema::Plan& plan, const std::string& code) {
  for (const auto& d : plan.diagnostics) {
    if (d.code == code) return &d;
  }
  return nullptr;
}

// GPT-like: embed and head are siblings; blocks nest inside layers.
IrBuilder gpt(bool tie_head) {
  IrBuilder b;
  b.module("embed").module("layers").module("layers.0").module("layers.0.mlp").module("head");
  b.param("", "scale", {4});  // the model's own parameters come first in definition order
  const int e = b.param("embed", "weight", {8, 4});
  b.param("layers.0", "norm", {4});
  b.param("layers.0.mlp", "fc", {4, 4});
  if (tie_head) {
    b.tie(e, "head", "weight");
  } else {
    b.param("head", "weight", {8, 4});
  }
  b.buffer("layers.0.mlp", "mask", {4});
  b.enter("embed").read(e).exit("embed");
  b.enter("layers.0").enter("layers.0.mlp").exit("layers.0.mlp").exit("layers.0");
  b.enter("head").read(e).exit("head");
  return b;
}

TEST(Ownership, UnitOwnsSubtreeParametersNotOwnedByNestedUnits) {
  const schema::Plan plan = plan_with(gpt(false).model(), {"<root>", "layers.0"});
  EXPECT_EQ(owned(plan, "<root>"),
            (std::vector<std::string>{"scale", "embed.weight", "head.weight"}));
  EXPECT_EQ(owned(plan, "layers.0"),
            (std::vector<std::string>{"layers.0.norm", "layers.0.mlp.fc"}));
  EXPECT_EQ(find_diagnostic(plan, "ownership.hoisted"), nullptr);
}

TEST(Ownership, UnitRecordsBuffersOfItsSubtree) {
  const schema::Plan plan = plan_with(gpt(false).model(), {"<root>", "layers.0"});
  ASSERT_EQ(plan.units[1].name, "layers.0");
  ASSERT_EQ(plan.units[1].buffers.size(), 1u);
  EXPECT_EQ(plan.units[1].buffers[0].name, "layers.0.mlp.mask");
  EXPECT_TRUE(plan.units[0].buffers.empty());
}

TEST(Ownership, TiedWeightRegisteredUnderTwoUnitsIsHoistedToCommonAncestor) {
  const schema::Plan plan = plan_with(gpt(true).model(), {"embed", "head", "layers.0", "<root>"});
  EXPECT_EQ(owned(plan, "embed"), std::vector<std::string>{});
  EXPECT_EQ(owned(plan, "head"), std::vector<std::string>{});
  EXPECT_EQ(owned(plan, "<root>"), (std::vector<std::string>{"scale", "embed.weight"}));
  const schema::Diagnostic* d = find_diagnostic(plan, "ownership.hoisted");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->where, "embed.weight");
  EXPECT_EQ(d->message,
            "parameter embed.weight (also head.weight) is used by units embed, head; owned by "
            "their lowest common unit <root>, which stays gathered across every use");
}

TEST(Ownership, FunctionalReadOfAnotherUnitsWeightIsHoisted) {
  IrBuilder b;
  b.module("embed").module("out");
  const int e = b.param("embed", "weight", {8, 4});
  b.param("out", "bias", {8});
  b.enter("embed").read(e).exit("embed");
  b.enter("out").read(e).exit("out");  // F.linear(x, embed.weight) inside out.forward
  const schema::Plan plan = plan_with(b.model(), {"embed", "out", "<root>"});
  EXPECT_EQ(owned(plan, "<root>"), std::vector<std::string>{"embed.weight"});
  EXPECT_EQ(owned(plan, "out"), std::vector<std::string>{"out.bias"});
  ASSERT_NE(find_diagnostic(plan, "ownership.hoisted"), nullptr);
}

TEST(Ownership, ReadByTheOwnerItselfIsNotAHoist) {
  const schema::Plan plan = plan_with(gpt(true).model(), {"<root>"});
  EXPECT_EQ(find_diagnostic(plan, "ownership.hoisted"), nullptr);
}

TEST(Ownership, SharedWeightWithoutCommonUnitFailsNamingUnitsToMerge) {
  IrBuilder b;
  b.module("embed").module("head");
  const int e = b.param("embed", "weight", {8, 4});
  b.tie(e, "head", "weight");
  b.call("embed").call("head");
  EXPECT_MFSDP_ERROR(plan_with(b.model(), {"embed", "head"}), ExitCode::kPlanning,
                     "parameter embed.weight is used by units embed and head (defined in head), "
                     "which share no enclosing unit; merge them by sharding a module that "
                     "contains both (e.g. --unit '<root>')");
}

TEST(Ownership, ReadOutsideEveryUnitFails) {
  IrBuilder b;
  b.module("embed");
  const int e = b.param("embed", "weight", {8, 4});
  b.call("embed").read(e);  // the model's own forward reads embed.weight
  EXPECT_MFSDP_ERROR(plan_with(b.model(), {"embed"}), ExitCode::kPlanning,
                     "parameter embed.weight (owned by unit embed) is read by <root> outside "
                     "every unit");
}

TEST(Ownership, ParameterOutsideEveryUnitStaysOutOfThePlanWithAWarning) {
  const schema::Plan plan = plan_with(gpt(false).model(), {"layers.0"});
  const schema::Diagnostic* d = find_diagnostic(plan, "ownership.unmanaged");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->severity, "warning");
  EXPECT_EQ(
      d->message.rfind(
          "3 parameter(s) (scale, embed.weight, head.weight) are in no unit of this scope", 0),
      0u);
  EXPECT_EQ(owned(plan, "layers.0"),
            (std::vector<std::string>{"layers.0.norm", "layers.0.mlp.fc"}));
}

}  // namespace
}  // namespace mfsdp::planner
