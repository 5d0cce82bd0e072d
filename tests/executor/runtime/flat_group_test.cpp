// The flat layout at run time: loading full parameters into every shard rank's master slice,
// then gathering the slices and unflattening them, gives the parameters back. Ranks are
// simulated in one process, one FlatGroup per shard rank.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "executor/runtime/flat_group.h"
#include "planner/sharding_scope.h"
#include "planner/torchscript/torch_model.h"
#include "tests/planner/ir_builder.h"

namespace mfsdp::executor {
namespace {

// Unit "a" with parameters of four dtypes, one of them frozen, and sizes that leave
// alignment gaps and padding.
schema::Unit plan_unit(int64_t shards) {
  mfsdp::testing::IrBuilder b;
  b.module("a");
  b.param("a", "w", {5, 3});
  b.param("a", "b", {7});
  b.param("a", "frozen", {2, 3}, "float32", false);
  b.param("a", "w64", {4}, "float64");
  b.param("a", "half", {9}, "float16");
  b.param("a", "brain", {3, 3}, "bfloat16");
  b.param("a", "scale", {1});
  b.call("a");
  planner::ShardedModel model = b.model();
  planner::ShardingScope scope(model, {shards, shards, 1}, {});
  scope.fully_shard("a");
  return scope.finalize().units.at(0);
}

// Distinct nonzero values, exactly representable in every floating dtype used here.
std::vector<at::Tensor> full_values(const schema::Group& group, int64_t seed) {
  std::vector<at::Tensor> values;
  for (const auto& p : group.params) {
    const at::Tensor v = (torch::arange(1, p.numel + 1, torch::kDouble) + 16 * seed) / 4;
    values.push_back(v.view(p.shape).to(planner::scalar_type_of(group.dtype)));
  }
  return values;
}

class FlatGroupLayout : public ::testing::TestWithParam<int> {};

TEST_P(FlatGroupLayout, LoadThenGatherThenUnflattenGivesBackTheParameters) {
  const int shards = GetParam();
  const schema::Unit unit = plan_unit(shards);
  ASSERT_EQ(unit.groups.size(), 5u);  // float32, frozen float32, float64, float16, bfloat16
  const schema::Policy policy;
  for (size_t g = 0; g < unit.groups.size(); ++g) {
    const schema::Group& layout = unit.groups[g];
    SCOPED_TRACE("group " + std::to_string(g) + " (" + layout.dtype +
                 (layout.requires_grad ? "" : ", frozen") + ")");
    ASSERT_EQ(layout.shard_numel * shards, layout.padded_numel);
    const std::vector<at::Tensor> values = full_values(layout, static_cast<int64_t>(g));

    std::vector<at::Tensor> masters;
    for (int r = 0; r < shards; ++r) {
      FlatGroup group(layout, policy, r, nullptr);
      group.load(values);
      EXPECT_EQ(group.trainable(), layout.requires_grad);
      EXPECT_EQ(group.master().requires_grad(), layout.requires_grad);
      EXPECT_EQ(group.master().scalar_type(), planner::scalar_type_of(layout.dtype));
      EXPECT_EQ(group.master().numel(), layout.shard_numel);
      if (group.trainable()) {
        EXPECT_EQ(group.main_grad().numel(), layout.shard_numel);
        EXPECT_EQ(group.main_grad().scalar_type(), at::kFloat);
      }
      masters.push_back(group.master().detach());
    }
    const at::Tensor gathered = torch::cat(masters);

    const std::vector<at::Tensor> back = FlatGroup(layout, policy, 0, nullptr).unflatten(gathered);
    ASSERT_EQ(back.size(), values.size());
    at::Tensor covered = torch::zeros({layout.padded_numel}, torch::kBool);
    for (size_t p = 0; p < values.size(); ++p) {
      EXPECT_EQ(back[p].scalar_type(), values[p].scalar_type()) << layout.params[p].name;
      EXPECT_TRUE(torch::equal(back[p], values[p])) << layout.params[p].name;
      covered.narrow(0, layout.params[p].offset, layout.params[p].numel).fill_(true);
    }
    // Alignment gaps and the padding past the last parameter stay zero.
    EXPECT_EQ(gathered.masked_select(covered.logical_not()).count_nonzero().item<int64_t>(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, FlatGroupLayout, ::testing::Values(1, 3, 8));

TEST(FlatGroup, EightRanksLeaveSomeShardsAllPadding) {
  const schema::Unit unit = plan_unit(8);
  const schema::Group& layout = unit.groups.at(2);  // float64 w64: 4 elements
  EXPECT_EQ(layout.numel, 4);
  EXPECT_EQ(layout.shard_numel, 2);  // 16 bytes
  FlatGroup last(layout, {}, 7, nullptr);
  last.load(full_values(layout, 0));
  EXPECT_EQ(last.master().count_nonzero().item<int64_t>(), 0);
}

// Reduced in bf16 or fp16, the main gradients stay float32: microbatches and replicas
// accumulate in full precision. A wider reduce dtype keeps its own width.
TEST(FlatGroup, MainGradientsAreFloat32UnderAHalfPrecisionReduceDtype) {
  const schema::Unit unit = plan_unit(2);
  const schema::Group& layout = unit.groups.at(0);  // float32
  for (const auto& [reduce, main] :
       std::vector<std::pair<std::string, c10::ScalarType>>{{"bfloat16", at::kFloat},
                                                            {"float16", at::kFloat},
                                                            {"float32", at::kFloat},
                                                            {"float64", at::kDouble}}) {
    schema::Policy policy;
    policy.reduce_dtype = reduce;
    FlatGroup group(layout, policy, 0, nullptr);
    EXPECT_EQ(group.main_grad().scalar_type(), main) << reduce;
    EXPECT_EQ(group.reduce_dtype(), planner::scalar_type_of(reduce)) << reduce;
  }
}

}  // namespace
}  // namespace mfsdp::executor
