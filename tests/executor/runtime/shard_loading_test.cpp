// Shard-wise loading (docs/large-models.md): every rank's master shards, filled from the mapped
// model file as Context::create fills them, against the same shards filled from LibTorch's own
// torch::jit::load of the file, bit for bit, for layouts that need padding and for HSDP.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "executor/runtime/flat_group.h"
#include "executor/runtime/initializer.h"
#include "executor/runtime/param_binding.h"
#include "planner/sharding_scope.h"
#include "planner/torchscript/torch_model.h"
#include "schema/error.h"
#include "tests/executor/train/error_of.h"

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

// Per group (plan order), every rank's master shard put together: the group's flat values.
std::vector<at::Tensor> whole_groups(const std::vector<std::vector<at::Tensor>>& per_rank) {
  std::vector<at::Tensor> out;
  for (size_t g = 0; g < per_rank.front().size(); ++g) {
    std::vector<at::Tensor> pieces;
    for (const auto& shards : per_rank) pieces.push_back(shards[g]);
    out.push_back(at::cat(pieces));
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
  const std::vector<at::Tensor> fulls = whole_groups(per_rank);
  size_t g = 0;
  for (const schema::Unit& unit : plan.units) {
    for (const schema::Group& group : unit.groups) {
      const at::Tensor& full = fulls[g];
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

// Every group's master shard for `shard_rank`, as shard_parameters fills it by --init's rule.
std::vector<at::Tensor> initialised_masters(const Initializer& rule, const schema::Plan& plan,
                                            int64_t shard_rank) {
  std::vector<at::Tensor> out;
  for (const schema::Unit& unit : plan.units) {
    for (const schema::Group& group : unit.groups) {
      FlatGroup flat(group, plan.policy, shard_rank, nullptr);
      flat.load([&](size_t p, int64_t first, int64_t count) {
        return rule.slice(group.params[p], first, count);
      });
      out.push_back(flat.master().detach().clone());
    }
  }
  return out;
}

// The full values of each parameter, by name, from the shards of every rank of `plan`.
std::map<std::string, at::Tensor> initialised_params(const schema::Plan& plan, uint64_t seed) {
  const Initializer rule("normal:0.02", seed, plan);
  std::vector<std::vector<at::Tensor>> per_rank;
  for (int64_t rank = 0; rank < plan.mesh.shard_size; ++rank) {
    per_rank.push_back(initialised_masters(rule, plan, rank));
  }
  std::map<std::string, at::Tensor> out;
  const std::vector<at::Tensor> fulls = whole_groups(per_rank);
  size_t g = 0;
  for (const schema::Unit& unit : plan.units) {
    for (const schema::Group& group : unit.groups) {
      const at::Tensor& full = fulls[g];
      for (const auto& layout : group.params) {
        out[layout.name] = full.narrow(0, layout.offset, layout.numel).view(layout.shape);
      }
      ++g;
    }
  }
  return out;
}

// --init normal:0.02: each element is a function of the seed, the name and its index, so the
// shards of any world size (HSDP too) tile into the same model; the rules by name and shape
// hold for every dtype.
TEST(InitRule, EveryWorldSizeStartsFromTheSameValuesByTheDocumentedRules) {
  const std::string path = save_sharding_model();
  const auto reference = initialised_params(plan_for(path, {1, 1, 1}), 0);
  for (const schema::Mesh mesh : {schema::Mesh{2, 2, 1}, schema::Mesh{3, 3, 1},
                                  schema::Mesh{4, 2, 2}, schema::Mesh{5, 5, 1}}) {
    SCOPED_TRACE("world " + std::to_string(mesh.world_size));
    const auto params = initialised_params(plan_for(path, mesh), 0);
    ASSERT_EQ(params.size(), reference.size());
    for (const auto& [name, value] : params) {
      ASSERT_EQ(value.nbytes(), reference.at(name).nbytes()) << name;
      EXPECT_EQ(std::memcmp(value.contiguous().data_ptr(),
                            reference.at(name).contiguous().data_ptr(), value.nbytes()),
                0)
          << name;
    }
  }
  for (const auto& [name, value] : reference) {
    SCOPED_TRACE(name);
    const at::Tensor v = value.to(at::kDouble);
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      EXPECT_EQ(v.count_nonzero().item<int64_t>(), 0);
    } else if (value.dim() == 1) {  // gate (bfloat16), frozen, scale (float64)
      EXPECT_TRUE(torch::equal(v, torch::ones_like(v)));
    } else {  // 41 x 41 and 97 x 41: the sample's mean and spread within a few standard errors
      const double n = static_cast<double>(v.numel());
      EXPECT_LT(std::abs(v.mean().item<double>()), 4 * 0.02 / std::sqrt(n));
      EXPECT_NEAR(v.std().item<double>(), 0.02, 4 * 0.02 / std::sqrt(2 * n));
      EXPECT_LT(v.abs().max().item<double>(), 7 * 0.02);
    }
  }
  // Each weight has values of its own, and another seed gives others.
  EXPECT_FALSE(torch::equal(reference.at("block0.weight"), reference.at("block1.weight")));
  const auto reseeded = initialised_params(plan_for(path, {2, 2, 1}), 1);
  EXPECT_FALSE(torch::equal(reseeded.at("block0.weight"), reference.at("block0.weight")));
  EXPECT_TRUE(torch::equal(reseeded.at("block0.bias"), reference.at("block0.bias")));
}

TEST(InitRule, ASpecOtherThanNormalWithAPositiveSpreadIsOneLine) {
  const schema::Plan plan = plan_for(save_sharding_model(), {2, 2, 1});
  for (const char* spec : {"normal:", "normal:0", "normal:-0.02", "normal:nan", "normal:inf",
                           "normal:0.02x", "uniform:0.1", "0.02", ""}) {
    SCOPED_TRACE(spec);
    const Error e = mfsdp::testing::error_of([&] { Initializer(spec, 0, plan); });
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_EQ(std::string(e.what()),
              "--init " + std::string(spec) +
                  ": expected normal:STD with STD a number above 0, e.g. --init normal:0.02 "
                  "(docs/large-models.md#initialiser)");
  }
}

// A parameter stored transposed (GPT-2's Conv1D weights, --name-map's "transpose") is read
// through a transposed view: its slices equal the contiguous values', and only the rows
// holding a slice are copied.
TEST(FlatSlice, SlicesOfATransposedViewEqualThoseOfItsContiguousCopy) {
  const at::Tensor stored = torch::randn({7, 13});
  const at::Tensor model = stored.t();  // 13 x 7, not contiguous
  const at::Tensor reference = model.contiguous().reshape({-1});
  for (int64_t first : {0, 1, 6, 7, 40, 90}) {
    for (const int64_t count : {int64_t{1}, int64_t{5}, int64_t{7}, int64_t{8}, 91 - first}) {
      if (first + count > 91) continue;
      EXPECT_TRUE(torch::equal(flat_slice(model, first, count), reference.narrow(0, first, count)))
          << first << " " << count;
    }
  }
}

}  // namespace
}  // namespace mfsdp::executor
