// The context on the GPU runtime (cuda_runtime.h): how the device is chosen, and training on
// one GPU by a plan against plain single-GPU LibTorch training of the same model on the same
// batches (tests/executor/parity/reference_training.h, which shares no mfsdp runtime code).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "executor/comm/rendezvous.h"
#include "executor/runtime/context.h"
#include "executor/runtime/cuda_runtime.h"
#include "executor/train/sharded_optimizer.h"
#include "gpu_required.h"
#include "planner/sharding_scope.h"
#include "schema/error.h"
#include "schema/plan_json.h"
#include "tests/executor/parity/parity_config.h"
#include "tests/executor/parity/reference_training.h"
#include "tests/executor/runtime/one_rank_world.h"
#include "text_match.h"

namespace mfsdp::executor {
namespace {

using namespace std::chrono_literals;
using testing::fixture_path;
using testing::TrainingTask;

struct GpuCase {
  std::string optimizer = "sgd";
  int microbatches = 1;
  std::optional<double> clip_grad_norm;
  std::optional<std::string> param_dtype;  // mixed precision on the mfsdp side only
  std::string reduce_dtype = "float32";
  double tolerance = 1e-4;         // relative, on parameters and losses
  bool checkpoint_blocks = false;  // activation checkpointing of layers.0 and layers.1
};

// tied_lm (two transformer layers, tied embedding) planned for one rank.
std::string one_rank_plan(const GpuCase& c, const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/context_gpu_" + name;
  std::filesystem::create_directories(dir);
  planner::ShardedModel model = planner::ShardedModel::load(fixture_path("tied_lm.pt"));
  schema::Policy policy;
  policy.param_dtype = c.param_dtype;
  policy.reduce_dtype = c.reduce_dtype;
  planner::ShardingScope scope(model, {1, 1, 1}, policy);
  for (const std::string unit : {"layers.0", "layers.1", "<root>"}) {
    scope.fully_shard(unit, {c.checkpoint_blocks && unit != "<root>"});
  }
  const std::string path = dir + "/plan.json";
  schema::write_file_atomically(path, schema::dump_plan(scope.finalize()));
  return path;
}

std::string error_of(const std::function<void()>& f, ExitCode expected) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  return "no error";
}

TEST(ContextDevice, UnknownDeviceIsAUsageError) {
  OneRankWorld world;
  ContextOptions options;
  options.device = "tpu";
  const std::string message = error_of(
      [&] {
        Context::create(one_rank_plan({}, "tpu"), fixture_path("tied_lm.pt"), world.env, options);
      },
      ExitCode::kUsage);
  EXPECT_TRUE(contains(message, "device must be cpu, cuda or auto, got 'tpu'"));
}

TEST(ContextDevice, CudaWithoutAUsableGpuFailsNamingTheRankAndTheReason) {
  OneRankWorld world;
  const GpuAvailability availability = gpu_availability(world.env);
  if (availability.available) GTEST_SKIP() << "this process can train on a GPU";
  ContextOptions options;
  options.device = "cuda";
  const std::string message = error_of(
      [&] {
        Context::create(one_rank_plan({}, "cuda_refused"), fixture_path("tied_lm.pt"), world.env,
                        options);
      },
      ExitCode::kRuntime);
  EXPECT_EQ(message, "rank 0 cannot train on a GPU: " + availability.why_not + "; " +
                         availability.fix + ", or train with --device cpu");
}

// Without a usable GPU, auto trains on the CPU and says why; bfloat16 gradient reduction is
// then refused, as the CPU collectives cannot carry it.
TEST(ContextDevice, AutoWithoutAUsableGpuTrainsOnTheCpuAndSaysWhy) {
  OneRankWorld world;
  const GpuAvailability availability = gpu_availability(world.env);
  if (availability.available) GTEST_SKIP() << "this process can train on a GPU";
  ContextOptions options;
  options.device = "auto";
  auto ctx =
      Context::create(one_rank_plan({}, "auto"), fixture_path("tied_lm.pt"), world.env, options);
  EXPECT_EQ(ctx->device(), at::Device(at::kCPU));
  EXPECT_EQ(ctx->device_description(),
            "cpu (auto: rank 0 has no usable GPU: " + availability.why_not + ")");
  const testing::Batch batch = testing::global_batch(testing::task_named("tied_lm"), 4, 0);
  const at::Tensor out = ctx->forward({batch.inputs}).toTensor();
  ctx->backward(testing::task_loss(testing::task_named("tied_lm"), out, batch.targets));
  for (const at::Tensor& shard : ctx->sharded_parameters()) EXPECT_FALSE(shard.is_cuda());

  OneRankWorld other;
  GpuCase bf16;
  bf16.reduce_dtype = "bfloat16";
  const std::string message = error_of(
      [&] {
        Context::create(one_rank_plan(bf16, "auto_bf16"), fixture_path("tied_lm.pt"), other.env,
                        options);
      },
      ExitCode::kUsage);
  EXPECT_TRUE(contains(message, "reduce dtype bfloat16 is not supported on the CPU (Gloo)"));
}

constexpr int kSteps = 8;

// Trains tied_lm for kSteps on GPU 0 by a one-rank plan and compares with the reference.
void expect_gpu_parity(const GpuCase& c, const std::string& name) {
  MFSDP_REQUIRE_GPU();
  OneRankWorld world;
  const GpuAvailability availability = gpu_availability(world.env);
  ASSERT_TRUE(availability.available) << availability.why_not;
  const TrainingTask task = testing::task_named("tied_lm");
  const std::string model = fixture_path(task.fixture);
  ContextOptions options;
  options.device = "cuda";
  options.collective_timeout = 60s;
  auto ctx = Context::create(one_rank_plan(c, name), model, world.env, options);
  ASSERT_EQ(ctx->device(), at::Device(at::kCUDA, 0));
  EXPECT_TRUE(starts_with(ctx->device_description(), "cuda:0 ("));
  ShardedOptimizer optimizer(*ctx, testing::parity_optimizer(c.optimizer));
  for (const at::Tensor& shard : ctx->sharded_parameters()) ASSERT_TRUE(shard.is_cuda());

  std::vector<double> losses;
  const int64_t micro = testing::kParityBatch / c.microbatches;
  const auto started = std::chrono::steady_clock::now();
  for (int step = 0; step < kSteps; ++step) {
    const testing::Batch global = testing::global_batch(task, testing::kParityBatch, step);
    double step_loss = 0;
    for (int m = 0; m < c.microbatches; ++m) {
      microbatch(*ctx, m + 1 == c.microbatches);
      const testing::Batch part = testing::rows(global, m * micro, (m + 1) * micro);
      const at::Tensor out = ctx->forward({part.inputs.to(ctx->device())}).toTensor();
      ASSERT_TRUE(out.is_cuda());
      const at::Tensor loss =
          testing::task_loss(task, out, part.targets.to(ctx->device())) / c.microbatches;
      ctx->backward(loss);
      step_loss += loss.item<double>();
    }
    if (c.clip_grad_norm) ctx->clip_grad_norm(*c.clip_grad_norm);
    optimizer.step();
    ctx->zero_grad();
    losses.push_back(ctx->mean_over_ranks(step_loss));
  }
  const int64_t elapsed_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                 std::chrono::steady_clock::now() - started)
                                 .count();
  const std::map<std::string, at::Tensor> params = ctx->full_parameters();
  const ContextStats stats = ctx->stats();
  EXPECT_EQ(stats.peak_unsharded_bytes, ctx->plan().memory.peak_unsharded_bytes);
  EXPECT_GE(stats.slot_bytes, ctx->plan().memory.slot_bytes);
  EXPECT_TRUE(stats.divergences.empty());
  // Compute's stalls are part of the loop's time (each wait counted once, none negative).
  EXPECT_GE(stats.exposed_comm_us, 0);
  EXPECT_LE(stats.exposed_comm_us, elapsed_us);

  const testing::TrainingResult reference = testing::train_reference(
      task, model, kSteps, c.optimizer, c.clip_grad_norm, at::Device(at::kCUDA, 0));
  ASSERT_EQ(params.size(), reference.params.size());
  double worst = 0;
  std::string worst_name;
  for (const auto& [param, expected] : reference.params) {
    ASSERT_TRUE(params.count(param)) << param;
    EXPECT_FALSE(params.at(param).is_cuda()) << "full_parameters() answers on the CPU";
    at::Tensor got = params.at(param).to(at::kDouble), want = expected.to(at::kDouble);
    const auto mask = reference.rounding_only.find(param);
    if (mask != reference.rounding_only.end()) {
      // Adam moves elements with rounding-only gradients by noise (see reference_training.h).
      got = got.masked_fill(mask->second, 0);
      want = want.masked_fill(mask->second, 0);
    }
    const double d = testing::relative_difference(got, want);
    if (d > worst) {
      worst = d;
      worst_name = param;
    }
  }
  std::cout << name << ": max relative parameter difference " << worst << " (" << worst_name
            << ")\n";
  EXPECT_LE(worst, c.tolerance) << worst_name;
  ASSERT_EQ(losses.size(), reference.losses.size());
  for (size_t s = 0; s < losses.size(); ++s) {
    EXPECT_NEAR(losses[s], reference.losses[s], c.tolerance * std::abs(reference.losses[s]))
        << "step " << s;
  }
  EXPECT_NE(reference.losses.front(), reference.losses.back());
}

TEST(ContextOnGpu, OneRankSgdMatchesSingleGpuLibTorch) {
  expect_gpu_parity({}, "sgd");
}

TEST(ContextOnGpu, OneRankAdamWWithMicrobatchesAndClippingMatchesSingleGpuLibTorch) {
  GpuCase c;
  c.optimizer = "adamw";
  c.microbatches = 4;
  c.clip_grad_norm = 0.5;
  expect_gpu_parity(c, "adamw_4mb_clip");
}

// bfloat16 parameters in compute, gradients reduced in bfloat16 by NCCL, fp32 masters: close
// to fp32 training, within bfloat16's precision.
TEST(ContextOnGpu, Bfloat16ComputeAndReductionTrainCloseToFp32) {
  GpuCase c;
  c.param_dtype = "bfloat16";
  c.reduce_dtype = "bfloat16";
  c.tolerance = 5e-2;
  expect_gpu_parity(c, "bf16");
}

// The blocks' forward recomputed in backward on the device: the recompute restores the CUDA
// generator's state and runs on the compute stream after the backward all-gather's wait.
TEST(ContextOnGpu, CheckpointedBlocksMatchSingleGpuLibTorch) {
  GpuCase c;
  c.optimizer = "adamw";
  c.microbatches = 4;
  c.checkpoint_blocks = true;
  expect_gpu_parity(c, "adamw_4mb_checkpoint");
}

}  // namespace
}  // namespace mfsdp::executor
