// Memory beyond the plan's buffers (docs/run.md, "Memory"): the counting allocator, a group's
// gradients reaching their handler without flat or autograd copies, and a context that,
// once the model is sharded, holds no copy of the model's full parameters.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/torch.h>

#include "executor/runtime/context.h"
#include "executor/runtime/flat_group.h"
#include "executor/train/sharded_optimizer.h"
#include "planner/sharding_scope.h"
#include "planner/torchscript/host_memory.h"
#include "schema/plan_json.h"
#include "tests/executor/parity/training_task.h"
#include "tests/executor/runtime/one_rank_world.h"
#include "tests/planner/ir_builder.h"

namespace mfsdp::executor {
namespace {

constexpr int64_t kMiB = 1 << 20;

TEST(HostMemory, CountsLiveAndPeakBytesOfSmallAndMappedTensors) {
  host_memory::install();
  const int64_t before = host_memory::tensor_bytes();
  host_memory::reset_peak();
  {
    at::Tensor large = torch::ones({kMiB}, torch::kFloat);  // 4 MiB: mapped from the kernel
    at::Tensor small = torch::ones({100}, torch::kFloat);
    EXPECT_EQ(host_memory::tensor_bytes() - before, 4 * kMiB + 400);
    EXPECT_EQ(large.sum().item<double>(), static_cast<double>(kMiB));
    EXPECT_EQ(small.sum().item<double>(), 100.0);
  }
  EXPECT_EQ(host_memory::tensor_bytes(), before);
  EXPECT_GE(host_memory::peak_tensor_bytes() - before, 4 * kMiB + 400);
  host_memory::reset_peak();
  EXPECT_EQ(host_memory::peak_tensor_bytes(), host_memory::tensor_bytes());
}

// A step asks for the sizes the one before it freed, though not always in the same order or
// cut the same way: freed pooled pages serve the next tensors whatever their sizes, so no
// system call maps new pages and none is faulted in again.
TEST(HostMemory, FreedPagesServeTheNextTensorsOfAnySize) {
  host_memory::install();
  const int64_t tensors = host_memory::tensor_bytes();
  {
    at::Tensor a = torch::full({kMiB}, 3.0f);       // 4 MiB
    at::Tensor b = torch::full({64 * 1024}, 3.0f);  // 256 KiB
    EXPECT_EQ(host_memory::tensor_bytes() - tensors, 4 * kMiB + 256 * 1024);
  }
  EXPECT_EQ(host_memory::tensor_bytes(), tensors);
  const host_memory::PoolCounts kept = host_memory::pool_counts();
  EXPECT_GE(kept.free_bytes, 4 * kMiB + 256 * 1024);
  {
    // Other sizes, within what was freed: one larger than either block alone.
    at::Tensor c = torch::full({kMiB + 16 * 1024}, 5.0f);
    at::Tensor d = torch::full({40 * 1024}, 7.0f);
    const host_memory::PoolCounts served = host_memory::pool_counts();
    EXPECT_EQ(served.fresh_bytes, kept.fresh_bytes);
    EXPECT_GE(served.reused_bytes - kept.reused_bytes, (kMiB + 16 * 1024 + 40 * 1024) * 4);
    EXPECT_LE(served.free_bytes + host_memory::tensor_bytes() - tensors, served.ceiling_bytes);
    EXPECT_EQ(c.sum().item<double>(), 5.0 * static_cast<double>(kMiB + 16 * 1024));
    EXPECT_EQ(d.sum().item<double>(), 7.0 * 40 * 1024);
  }
  EXPECT_EQ(host_memory::tensor_bytes(), tensors);
  host_memory::release_cache();
  EXPECT_EQ(host_memory::pool_counts().free_bytes, 0);
  EXPECT_EQ(host_memory::cached_bytes(), 0);
}

// A raw block of the allocator the counting one replaced, freed through the counting one (a
// library that kept the old raw_deleter's pointer, or a block made before install()), goes
// back to its own allocator: neither counted nor mistaken for a pooled or a malloc'd block.
TEST(HostMemory, HandsAForeignRawBlockBackToItsOwnAllocator) {
  host_memory::install();
  const int64_t tensors = host_memory::tensor_bytes();
  const host_memory::PoolCounts pool = host_memory::pool_counts();
  for (const size_t bytes : {size_t{4096}, size_t{1} << 20, size_t{8} << 20}) {
    void* foreign = c10::alloc_cpu(bytes);  // LibTorch's own CPU block, 64-byte aligned
    ASSERT_NE(foreign, nullptr);
    static_cast<char*>(foreign)[bytes - 1] = 1;
    at::DataPtr ours = c10::GetCPUAllocator()->allocate(64);
    ours.get_deleter()(foreign);  // the counting allocator's raw deleter
  }
  EXPECT_EQ(host_memory::tensor_bytes(), tensors);
  EXPECT_EQ(host_memory::pool_counts().fresh_bytes, pool.fresh_bytes);
}

// malloc's bytes for objects leave out the blocks of small tensors, and count other buffers.
TEST(HostMemory, HeapObjectsLeaveOutTensorsAndCountOtherAllocations) {
  host_memory::install();
  const int64_t before = host_memory::heap_object_bytes();
  std::vector<at::Tensor> small;
  for (int i = 0; i < 100; ++i) small.push_back(torch::ones({1000}, torch::kFloat));  // 4 KB
  // Only the tensors' C++ objects and malloc's headers, a few hundred bytes per tensor, never
  // the blocks' 400 KB.
  EXPECT_LT(std::abs(host_memory::heap_object_bytes() - before), 100 * 1000);
  std::vector<char> buffer(2 * kMiB, 'x');
  EXPECT_GE(host_memory::heap_object_bytes() - before, 2 * kMiB);
  EXPECT_EQ(buffer[kMiB], 'x');
}

TEST(HostMemory, ReadsTheResidentSetAndItsHighWaterMark) {
  EXPECT_GT(host_memory::rss_bytes(), 0);
  EXPECT_GE(host_memory::peak_rss_bytes(), host_memory::rss_bytes());
}

// One 4 MiB weight and a bias in one unit of a one-rank plan.
schema::Unit one_big_unit() {
  testing::IrBuilder b;
  b.module("a");
  b.param("a", "w", {1024, 1024});
  b.param("a", "b", {1024});
  b.call("a");
  planner::ShardedModel model = b.model();
  planner::ShardingScope scope(model, {1, 1, 1}, {});
  scope.fully_shard("a");
  return scope.finalize().units.at(0);
}

// That unit's one group over a slot of ones.
struct BigGroup {
  schema::Unit unit = one_big_unit();
  std::vector<float> slot = std::vector<float>(static_cast<size_t>(layout().padded_numel), 1.0f);
  FlatGroup group{layout(), schema::Policy{}, 0, slot.data()};
  const schema::Group& layout() const { return unit.groups.at(0); }
};

TEST(FlatGroupGradient, ArrivesOnceAsPerParameterSumsWithoutFlatOrTiedCopies) {
  host_memory::install();
  BigGroup big;
  const schema::Group& layout = big.layout();
  FlatGroup& group = big.group;
  std::vector<std::vector<at::Tensor>> received;
  group.bind([&](std::vector<at::Tensor>&& grads) { received.push_back(std::move(grads)); });
  // The weight is used twice through two registrations (a tied weight), the bias once.
  const at::Tensor loss =
      (group.param(0) * 2).sum() + (group.param(0) * 5).sum() + (group.param(1) * 3).sum();

  const int64_t before = host_memory::tensor_bytes();
  host_memory::reset_peak();
  loss.backward();
  ASSERT_EQ(received.size(), 1u);
  ASSERT_EQ(received[0].size(), 2u);
  const at::Tensor& w = received[0][0];
  const at::Tensor& b = received[0][1];
  ASSERT_EQ(w.sizes(), at::IntArrayRef(layout.params[0].shape));
  EXPECT_TRUE(w.eq(7).all().item<bool>());
  EXPECT_TRUE(b.eq(3).all().item<bool>());
  // The handler's gradients are the only ones alive: no flat copy of the group, nothing
  // accumulated into the master's (or any leaf's) .grad.
  EXPECT_FALSE(group.master().grad().defined());
  EXPECT_EQ(host_memory::tensor_bytes() - before, (w.numel() + b.numel()) * 4);
  // Beside the weight's sum, at most the second use's gradient being added: autograd never
  // sums the two uses out of place, and no flat gradient is made.
  EXPECT_LE(host_memory::peak_tensor_bytes() - before, (2 * w.numel() + b.numel()) * 4 + kMiB);
  group.release();
}

// A gradient that autograd hands over whole is kept as it is, not copied: the weight's
// gradient costs its own bytes once, never twice.
TEST(FlatGroupGradient, KeepsAutogradsOwnGradientWithoutACopy) {
  host_memory::install();
  BigGroup big;
  const schema::Group& layout = big.layout();
  FlatGroup& group = big.group;
  std::vector<at::Tensor> received;
  group.bind([&](std::vector<at::Tensor>&& grads) { received = std::move(grads); });
  const at::Tensor loss = (group.param(0) * 2).sum();

  const int64_t before = host_memory::tensor_bytes();
  host_memory::reset_peak();
  loss.backward();
  ASSERT_EQ(received.size(), 2u);
  EXPECT_TRUE(received[0].eq(2).all().item<bool>());
  EXPECT_FALSE(received[1].defined());  // the bias took no part
  const int64_t weight_bytes = received[0].numel() * 4;
  EXPECT_EQ(host_memory::tensor_bytes() - before, weight_bytes);
  // A copy would have held two at once.
  EXPECT_LT(host_memory::peak_tensor_bytes() - before, weight_bytes + weight_bytes / 2);
  // As one flat tensor (what NCCL reads): zeros wherever no gradient arrived.
  const at::Tensor flat = group.flat_gradient(received, at::TensorOptions().dtype(at::kFloat));
  ASSERT_EQ(flat.numel(), layout.padded_numel);
  const auto& w = layout.params[0];
  EXPECT_TRUE(flat.narrow(0, w.offset, w.numel).eq(2).all().item<bool>());
  EXPECT_EQ(flat.sum().item<double>(), 2.0 * static_cast<double>(w.numel));
  group.release();
}

// A tied weight's gradient goes to the early handler as soon as its first use is summed, so
// the second use's gradient never waits beside it; the group's gradient then holds the rest.
TEST(FlatGroupGradient, HandsATiedWeightsFirstUsesOverEarly) {
  host_memory::install();
  BigGroup big;
  FlatGroup& group = big.group;
  std::vector<std::vector<at::Tensor>> received;
  std::vector<std::pair<size_t, double>> early;  // parameter, value of each element
  group.bind([&](std::vector<at::Tensor>&& grads) { received.push_back(std::move(grads)); },
             [&](size_t p, at::Tensor&& gradient) {
               ASSERT_TRUE(gradient.is_contiguous());
               const double first = gradient.reshape({-1})[0].item<double>();
               EXPECT_TRUE(gradient.eq(first).all().item<bool>());
               early.emplace_back(p, first);
             });
  const at::Tensor loss =
      (group.param(0) * 2).sum() + (group.param(0) * 5).sum() + (group.param(1) * 3).sum();

  const int64_t before = host_memory::tensor_bytes();
  host_memory::reset_peak();
  loss.backward();
  ASSERT_EQ(early.size(), 1u);
  EXPECT_EQ(early[0].first, 0u);
  ASSERT_EQ(received.size(), 1u);
  const at::Tensor& w = received[0][0];
  ASSERT_TRUE(w.defined());
  // The two uses' gradients, 2 and 5, in whichever order autograd ran them.
  EXPECT_TRUE(w.eq(7 - early[0].second).all().item<bool>());
  EXPECT_TRUE(early[0].second == 2 || early[0].second == 5);
  EXPECT_TRUE(received[0][1].eq(3).all().item<bool>());
  // Never two of the weight's gradients at once.
  EXPECT_LT(host_memory::peak_tensor_bytes() - before, (w.numel() + w.numel() / 2) * 4);
  group.release();
}

// With one use per parameter nothing goes early.
TEST(FlatGroupGradient, SendsNothingEarlyWithoutFurtherUses) {
  BigGroup big;
  FlatGroup& group = big.group;
  int early = 0, completed = 0;
  group.bind([&](std::vector<at::Tensor>&&) { ++completed; },
             [&](size_t, at::Tensor&&) { ++early; });
  ((group.param(0) * 2).sum() + group.param(1).sum()).backward();
  EXPECT_EQ(early, 0);
  EXPECT_EQ(completed, 1);
  group.release();
}

std::string fixture_path(const std::string& file) {
  return std::string(MFSDP_SOURCE_DIR) + "/tests/fixtures/" + file;
}

std::string one_rank_plan(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/memory_" + name;
  std::filesystem::create_directories(dir);
  planner::ShardedModel model = planner::ShardedModel::load(fixture_path("tied_lm.pt"));
  planner::ShardingScope scope(model, {1, 1, 1}, {});
  for (const char* unit : {"layers.0", "layers.1", "<root>"}) scope.fully_shard(unit);
  const std::string path = dir + "/plan.json";
  schema::write_file_atomically(path, schema::dump_plan(scope.finalize()));
  return path;
}

// After set-up and after a training step, the tensors alive are the plan's per-rank state
// (shards, main gradients and slots) and the optimizer's, nothing like a second copy of the
// model (with one rank the shards are
// the whole model, so a leftover copy would add all of model_bytes).
TEST(ContextMemory, HoldsNoCopyOfTheModelAndMeasuresTheActivationPeak) {
  host_memory::install();
  OneRankWorld world;
  const std::string plan = one_rank_plan("no_copy");
  const int64_t before = host_memory::tensor_bytes();
  auto ctx = Context::create(plan, fixture_path("tied_lm.pt"), world.env);
  ContextStats stats = ctx->stats();
  ASSERT_GT(stats.model_bytes, 0);
  EXPECT_GT(stats.runtime_base_rss_bytes, 0);
  EXPECT_GE(stats.setup_peak_rss_bytes, stats.runtime_base_rss_bytes);
  const int64_t state = stats.sharded_param_bytes + stats.sharded_grad_bytes + stats.slot_bytes;
  EXPECT_LT(host_memory::tensor_bytes() - before, state + stats.model_bytes / 4);

  OptimizerConfig adamw;
  ShardedOptimizer optimizer(*ctx, adamw);
  const testing::TrainingTask task = testing::task_named("tied_lm");
  const testing::Batch batch = testing::global_batch(task, 4, 0);
  microbatch(*ctx, true);
  const at::Tensor out = ctx->forward({batch.inputs}).toTensor();
  const int64_t logits_bytes = out.numel() * out.element_size();
  ctx->backward(testing::task_loss(task, out, batch.targets));
  optimizer.step();
  ctx->zero_grad();

  stats = ctx->stats();
  // The logits (and their gradient) live through backward.
  EXPECT_GE(stats.activation_peak_bytes, logits_bytes);
  // Adam's two moments per trainable master element.
  EXPECT_EQ(optimizer.state_bytes(), 2 * stats.sharded_param_bytes);
  const int64_t alive = host_memory::tensor_bytes() - before - out.numel() * out.element_size();
  EXPECT_LT(alive, state + optimizer.state_bytes() + stats.model_bytes / 4);
  EXPECT_GE(alive, state + optimizer.state_bytes());
}

}  // namespace
}  // namespace mfsdp::executor
