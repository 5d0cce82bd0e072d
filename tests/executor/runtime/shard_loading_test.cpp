// Shard-wise loading (docs/large-models.md): every rank's master shards, filled from the mapped
// model file as Context::create fills them, against the same shards filled from LibTorch's own
// torch::jit::load of the file, bit for bit, for layouts that need padding and for HSDP.
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "executor/runtime/flat_group.h"
#include "executor/runtime/param_binding.h"
#include "planner/sharding_scope.h"
#include "planner/torchscript/torch_model.h"

namespace mfsdp::executor {
namespace {

std::string shard_loading_dir() {
  const std::string dir = ::testing::TempDir() + "/shard_loading_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

// Two blocks and a root with float32, bfloat16 and float64 parameters of odd sizes (every
// world size below pads), a frozen parameter, the head tied to the embedding, and a buffer;
// all but the biases large enough (4 KiB) to be mapped rather than read.
std::string save_sharding_model() {
  const std::string path = shard_loading_dir() + "/sharding_model.pt";
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  torch::jit::Module root("__torch__.ShardingModel");
  const at::Tensor embedding = torch::randn({97, 41});
  for (const char* name : {"block0", "block1"}) {
    torch::jit::Module block(std::string("__torch__.Block_") + name);
    block.register_parameter("weight", torch::randn({41, 41}), false);
    block.register_parameter("bias", torch::randn({41}), false);
    block.register_parameter("gate", torch::randn({2049}).to(torch::kBFloat16), false);
    block.register_parameter("frozen", torch::randn({1025}).set_requires_grad(false), false);
    block.define(R"(
      def forward(self, x: Tensor) -> Tensor:
          y = x.matmul(self.weight) + self.bias
          return y * self.gate.float().sum() + self.frozen.sum()
    )");
    root.register_module(name, block);
  }
  torch::jit::Module head("__torch__.Head");
  head.register_parameter("weight", embedding, false);
  head.register_parameter("scale", torch::randn({777}, torch::kDouble), false);
  head.define(R"(
    def forward(self, x: Tensor) -> Tensor:
        return x.matmul(self.weight.t()) * self.scale.sum().float()
  )");
  root.register_parameter("embedding", embedding, false);
  root.register_buffer("positions", torch::arange(4099, torch::kLong));
  root.register_module("head", head);
  root.define(R"(
    def forward(self, idx: Tensor) -> Tensor:
        x = self.embedding[idx] + self.positions[0].float()
        return self.head.forward(self.block1.forward(self.block0.forward(x)))
  )");
  for (const auto& p : root.named_parameters(/*recurse=*/true)) {
    if (p.name.find("frozen") != std::string::npos) p.value.set_requires_grad(false);
  }
  root.save(path);
  return path;
}

schema::Plan plan_for(const std::string& model_path, schema::Mesh mesh) {
  planner::ShardedModel model = planner::ShardedModel::load(model_path);
  planner::ShardingScope scope(model, mesh, {});
  for (const char* unit : {"block0", "block1", "<root>"}) scope.fully_shard(unit);
  return scope.finalize();
}

// Every group's master shard for `shard_rank`, as shard_parameters fills it from `module`.
std::vector<at::Tensor> masters(const torch::jit::Module& module, const schema::Plan& plan,
                                int64_t shard_rank) {
  const ModelAttributes attributes(module);
  std::vector<at::Tensor> out;
  for (const schema::Unit& unit : plan.units) {
    for (const schema::Group& group : unit.groups) {
      FlatGroup flat(group, plan.policy, shard_rank, nullptr);
      flat.load(current_values(attributes.locate(group)));
      out.push_back(flat.master().detach().clone());
    }
  }
  return out;
}

TEST(ShardLoading, EveryRanksShardsEqualThoseFromTorchJitLoadBitForBit) {
  const std::string path = save_sharding_model();
  const torch::jit::Module loaded = torch::jit::load(path);
  for (const schema::Mesh mesh : {schema::Mesh{2, 2, 1}, schema::Mesh{3, 3, 1},
                                  schema::Mesh{4, 2, 2}, schema::Mesh{5, 5, 1}}) {
    SCOPED_TRACE("world " + std::to_string(mesh.world_size) + " shard " +
                 std::to_string(mesh.shard_size));
    const schema::Plan plan = plan_for(path, mesh);
    for (int64_t rank = 0; rank < mesh.world_size; ++rank) {
      const int64_t shard_rank = rank % mesh.shard_size;
      // A fresh mapped load per rank, as each rank makes its own.
      const auto mine = masters(planner::load_module(path), plan, shard_rank);
      const auto reference = masters(loaded, plan, shard_rank);
      ASSERT_EQ(mine.size(), reference.size());
      for (size_t g = 0; g < mine.size(); ++g) {
        ASSERT_EQ(mine[g].nbytes(), reference[g].nbytes()) << "group " << g;
        EXPECT_EQ(std::memcmp(mine[g].data_ptr(), reference[g].data_ptr(), mine[g].nbytes()), 0)
            << "rank " << rank << " group " << g;
      }
    }
  }
}

// The shards tile the parameters: every element of every parameter is in exactly one rank's
// shard, and the padding past the last parameter is zero.
TEST(ShardLoading, ShardsOfAllRanksTogetherHoldEveryParameterOnce) {
  const std::string path = save_sharding_model();
  const schema::Plan plan = plan_for(path, {3, 3, 1});
  std::vector<std::vector<at::Tensor>> per_rank;
  for (int64_t rank = 0; rank < 3; ++rank) {
    per_rank.push_back(masters(planner::load_module(path), plan, rank));
  }
  const torch::jit::Module loaded = torch::jit::load(path);
  const ModelAttributes attributes(loaded);
  size_t g = 0;
  for (const schema::Unit& unit : plan.units) {
    for (const schema::Group& group : unit.groups) {
      std::vector<at::Tensor> pieces;
      for (const auto& shards : per_rank) pieces.push_back(shards[g]);
      const at::Tensor full = at::cat(pieces);
      const std::vector<at::Tensor> values = current_values(attributes.locate(group));
      int64_t end = 0;
      for (size_t p = 0; p < group.params.size(); ++p) {
        const auto& layout = group.params[p];
        EXPECT_TRUE(torch::equal(full.narrow(0, layout.offset, layout.numel),
                                 values[p].reshape({-1}).to(full.scalar_type())))
            << layout.name;
        end = std::max(end, layout.offset + layout.numel);
      }
      EXPECT_EQ(full.narrow(0, end, full.numel() - end).count_nonzero().item<int64_t>(), 0);
      ++g;
    }
  }
}

}  // namespace
}  // namespace mfsdp::executor
