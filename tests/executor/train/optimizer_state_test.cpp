// Reading an optimizer's saved state ourselves (optimizer_state.h): by position, whichever
// LibTorch version spelled the parameter keys.
#include "executor/train/optimizer_state.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "executor/train/sharded_optimizer.h"
#include "schema/error.h"
#include "tests/executor/train/error_of.h"

namespace mfsdp::executor {
namespace {

torch::serialize::InputArchive reread(torch::serialize::OutputArchive& out) {
  std::ostringstream bytes;
  out.save_to(bytes);
  std::istringstream in(bytes.str());
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  return archive;
}

// An AdamW archive in LibTorch's layout with the keys spelled as given: the first parameter
// has state (step 3), the second none yet.
torch::serialize::InputArchive adamw_archive(const std::string& key0, const std::string& key1,
                                             const at::Tensor& exp_avg,
                                             const at::Tensor& exp_avg_sq) {
  torch::serialize::OutputArchive archive;
  archive.write("pytorch_version", c10::IValue("1.5.0"));
  torch::serialize::OutputArchive state(archive.compilation_unit());
  torch::serialize::OutputArchive first(archive.compilation_unit());
  first.write("step", c10::IValue(int64_t{3}));
  first.write("exp_avg", exp_avg);
  first.write("exp_avg_sq", exp_avg_sq);
  state.write(key0, first);
  archive.write("state", state);
  torch::serialize::OutputArchive groups(archive.compilation_unit());
  groups.write("param_groups/size", torch::tensor(int64_t{1}));
  torch::serialize::OutputArchive group(archive.compilation_unit());
  group.write("params/size", torch::tensor(int64_t{2}));
  group.write("params/0", c10::IValue(key0));
  group.write("params/1", c10::IValue(key1));
  groups.write("param_groups/0", group);
  archive.write("param_groups", groups);
  return reread(archive);
}

// LibTorch 1.x keys parameters by the pointer in hexadecimal, 2.x in decimal; LibTorch 2.x's
// own load() reads every 1.x key as 0 and gives all the state to one parameter.
TEST(OptimizerStateArchive, ReadsTheKeysOfEitherLibTorchVersionByPosition) {
  const at::Tensor exp_avg = torch::arange(4, at::kFloat);
  const at::Tensor exp_avg_sq = torch::arange(4, at::kFloat) * 2;
  for (const auto& [key0, key1] :
       {std::pair<std::string, std::string>{"0x55d0c0ffee10", "0x55d0c0ffee90"},
        {"94011238776336", "94011238776464"}}) {
    torch::serialize::InputArchive archive = adamw_archive(key0, key1, exp_avg, exp_avg_sq);
    const auto states = read_param_states(archive, "rank-00000.pt");
    ASSERT_EQ(states.size(), 2u) << key0;
    ASSERT_TRUE(states[0].has_value());
    EXPECT_FALSE(states[1].has_value());
    EXPECT_EQ(states[0]->step, 3);
    ASSERT_EQ(states[0]->tensors.size(), 2u);
    EXPECT_EQ(states[0]->tensors[0].first, "exp_avg");
    EXPECT_TRUE(at::equal(states[0]->tensors[0].second, exp_avg));
    EXPECT_EQ(states[0]->tensors[1].first, "exp_avg_sq");
    EXPECT_TRUE(at::equal(states[0]->tensors[1].second, exp_avg_sq));

    // And an AdamW over two parameters takes it and steps on.
    std::vector<at::Tensor> params = {torch::zeros({4}, at::requires_grad()),
                                      torch::zeros({2}, at::requires_grad())};
    OptimizerConfig config;
    auto optimizer = make_optimizer(params, config);
    set_param_states(*optimizer, states);
    params[0].mutable_grad() = torch::ones({4});
    params[1].mutable_grad() = torch::ones({2});
    optimizer->step();
    const auto after = param_states(*optimizer);
    EXPECT_EQ(after[0]->step, 4);
    EXPECT_EQ(after[1]->step, 1);
  }
}

// What an optimizer saves, read back, is what it holds.
TEST(OptimizerStateArchive, ReadsBackWhatAnOptimizerSaved) {
  std::vector<at::Tensor> params = {torch::randn({3, 2}, at::requires_grad()),
                                    torch::randn({5}, at::requires_grad())};
  OptimizerConfig config;
  config.kind = "adamw";
  auto optimizer = make_optimizer(params, config);
  for (int step = 0; step < 2; ++step) {
    for (at::Tensor& p : params) p.mutable_grad() = torch::randn(p.sizes());
    optimizer->step();
  }
  torch::serialize::OutputArchive out;
  optimizer->save(out);
  torch::serialize::InputArchive in = reread(out);
  const auto read = read_param_states(in, "rank-00000.pt");
  const auto held = param_states(*optimizer);
  ASSERT_EQ(read.size(), held.size());
  for (size_t i = 0; i < held.size(); ++i) {
    ASSERT_TRUE(read[i] && held[i]);
    EXPECT_EQ(read[i]->step, held[i]->step);
    ASSERT_EQ(read[i]->tensors.size(), held[i]->tensors.size());
    for (size_t t = 0; t < held[i]->tensors.size(); ++t) {
      EXPECT_EQ(read[i]->tensors[t].first, held[i]->tensors[t].first);
      EXPECT_TRUE(at::equal(read[i]->tensors[t].second, held[i]->tensors[t].second));
    }
  }
}

TEST(OptimizerStateArchive, RefusesAnArchiveThatIsNoOptimizersNamingTheFile) {
  torch::serialize::OutputArchive out;
  out.write("shards", torch::zeros({2}));
  torch::serialize::InputArchive in = reread(out);
  const Error e = mfsdp::testing::error_of([&] { read_param_states(in, "ckpt/rank-00001.pt"); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_NE(std::string(e.what()).find("ckpt/rank-00001.pt: its optimizer state cannot be read"),
            std::string::npos)
      << e.what();
}

}  // namespace
}  // namespace mfsdp::executor
