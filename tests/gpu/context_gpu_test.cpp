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
#include "executor/runtime/cuda_stream.h"
#include "executor/runtime/torch_cuda_stream.h"
#include "executor/train/checkpoint.h"
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
  std::vector<std::string> units = {"layers.0", "layers.1", "<root>"};
  int64_t prefetch = 1;  // forward and backward
  bool unified_stream = false;
};

// Five units where three fit at once: with prefetch 1 or 2 they take turns in shared slots,
// so a wait missing before a slot's next all-gather overwrites parameters still in use.
const std::vector<std::string> kFineUnits = {"layers.0.attn", "layers.0.mlp", "layers.1.attn",
                                             "layers.1.mlp", "<root>"};

// AdamW over four microbatches with the five units above, `prefetch` all-gathers ahead.
GpuCase fine_units(int64_t prefetch) {
  GpuCase c;
  c.optimizer = "adamw";
  c.microbatches = 4;
  c.units = kFineUnits;
  c.prefetch = prefetch;
  return c;
}

// tied_lm (two transformer layers, tied embedding) planned for one rank.
std::string one_rank_plan(const GpuCase& c, const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/context_gpu_" + name;
  std::filesystem::create_directories(dir);
  planner::ShardedModel model = planner::ShardedModel::load(fixture_path("tied_lm.pt"));
  schema::Policy policy;
  policy.param_dtype = c.param_dtype;
  policy.reduce_dtype = c.reduce_dtype;
  policy.forward_prefetch = c.prefetch;
  policy.backward_prefetch = c.prefetch;
  policy.unified_stream = c.unified_stream;
  planner::ShardingScope scope(model, {1, 1, 1}, policy);
  for (const std::string& unit : c.units) {
    scope.fully_shard(unit, {c.checkpoint_blocks && unit != "<root>", std::nullopt});
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

// Steps [first, first + steps) of the parity batches on `ctx`, by `c`'s microbatches and
// clipping; the mean loss of each step.
std::vector<double> train_steps(Context& ctx, ShardedOptimizer& optimizer, const GpuCase& c,
                                const TrainingTask& task, int first, int steps) {
  std::vector<double> losses;
  const int64_t micro = testing::kParityBatch / c.microbatches;
  for (int step = first; step < first + steps; ++step) {
    const testing::Batch global = testing::global_batch(task, testing::kParityBatch, step);
    double step_loss = 0;
    for (int m = 0; m < c.microbatches; ++m) {
      microbatch(ctx, m + 1 == c.microbatches);
      const testing::Batch part = testing::rows(global, m * micro, (m + 1) * micro);
      const at::Tensor out = ctx.forward({part.inputs.to(ctx.device())}).toTensor();
      EXPECT_TRUE(out.is_cuda());
      const at::Tensor loss =
          testing::task_loss(task, out, part.targets.to(ctx.device())) / c.microbatches;
      ctx.backward(loss);
      step_loss += loss.item<double>();
    }
    if (c.clip_grad_norm) ctx.clip_grad_norm(*c.clip_grad_norm);
    optimizer.step();
    ctx.zero_grad();
    losses.push_back(ctx.mean_over_ranks(step_loss));
  }
  return losses;
}

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
  if (c.units.size() > 3) {
    EXPECT_LT(ctx->plan().memory.slots.size(), c.units.size()) << "no unit shares a slot";
  }
  EXPECT_TRUE(starts_with(ctx->device_description(), "cuda:0 ("));
  ShardedOptimizer optimizer(*ctx, testing::parity_optimizer(c.optimizer));
  for (const at::Tensor& shard : ctx->sharded_parameters()) ASSERT_TRUE(shard.is_cuda());

  const auto started = std::chrono::steady_clock::now();
  const std::vector<double> losses = train_steps(*ctx, optimizer, c, task, 0, kSteps);
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

// Units taking turns in shared slots, two all-gathers ahead, on one stream for every
// collective, over four microbatches.
TEST(ContextOnGpu, UnitsSharingSlotsTwoAheadOnOneStreamMatchSingleGpuLibTorch) {
  GpuCase c = fine_units(2);
  c.unified_stream = true;
  expect_gpu_parity(c, "shared_slots_prefetch2_unified");
}

// The same in bfloat16 compute with float32 reduce-scatters and main gradients, one ahead.
TEST(ContextOnGpu, UnitsSharingSlotsInBfloat16WithFloat32ReductionTrainCloseToFp32) {
  GpuCase c = fine_units(1);
  c.param_dtype = "bfloat16";
  c.tolerance = 5e-2;
  expect_gpu_parity(c, "shared_slots_bf16_fp32_reduce");
}

// The race amplifier: every collective, and every addition of a reduce-scatter's output into
// the main gradients, starts 3 ms late on its stream. A wait missing between compute and the
// collective streams would now read slots before their all-gather lands, or main gradients
// before they are summed, and parity would fail.
TEST(ContextOnGpu, DelayedCollectiveStreamsKeepParity) {
  GpuCase c = fine_units(2);
  const std::chrono::microseconds before = debug_stream_delay();
  set_debug_stream_delay(3ms);
  expect_gpu_parity(c, "race_amplifier");
  set_debug_stream_delay(before);
}

// LibTorch's current stream is a stream of mfsdp's making rather than the default stream:
// the context computes on it, and every wait between it and the collectives still holds.
TEST(ContextOnGpu, NonDefaultComputeStreamKeepsParity) {
  MFSDP_REQUIRE_GPU();
  GpuCase c = fine_units(2);
  CudaStream side("side compute", 0);
  run_with_torch_stream(side.native(), 0, [&] { expect_gpu_parity(c, "side_stream"); });
  side.synchronize();
}

// evaluate() on the GPU changes no parameter and gives the same output twice; a checkpoint
// saved after 3 steps and resumed into a fresh context continues the run it was saved from.
TEST(ContextOnGpu, EvaluateAndCheckpointResumeContinueTheRun) {
  MFSDP_REQUIRE_GPU();
  GpuCase c = fine_units(1);
  const TrainingTask task = testing::task_named("tied_lm");
  const std::string model = fixture_path(task.fixture);
  const std::string plan = one_rank_plan(c, "evaluate_resume");
  const std::string dir = ::testing::TempDir() + "/context_gpu_resume";
  std::filesystem::remove_all(dir);
  ContextOptions options;
  options.device = "cuda";
  options.collective_timeout = 60s;

  std::map<std::string, at::Tensor> straight;
  std::vector<double> straight_losses;
  {
    OneRankWorld world;
    auto ctx = Context::create(plan, model, world.env, options);
    ShardedOptimizer optimizer(*ctx, testing::parity_optimizer(c.optimizer));
    train_steps(*ctx, optimizer, c, task, 0, 3);
    const std::map<std::string, at::Tensor> before = ctx->full_parameters();
    const testing::Batch batch = testing::global_batch(task, 8, 100);
    const at::Tensor first = ctx->evaluate({batch.inputs.to(ctx->device())}).toTensor().cpu();
    const at::Tensor again = ctx->evaluate({batch.inputs.to(ctx->device())}).toTensor().cpu();
    EXPECT_TRUE(at::equal(first, again));
    for (const auto& [name, value] : ctx->full_parameters()) {
      EXPECT_TRUE(at::equal(value, before.at(name))) << "evaluate() changed " << name;
    }
    TrainingState state;
    state.step = 3;
    save_checkpoint(*ctx, optimizer, dir, state, 0);
    straight_losses = train_steps(*ctx, optimizer, c, task, 3, 3);
    straight = ctx->full_parameters();
  }
  OneRankWorld world;
  auto ctx = Context::create(plan, model, world.env, options);
  ShardedOptimizer optimizer(*ctx, testing::parity_optimizer(c.optimizer));
  const TrainingState resumed = load_checkpoint(*ctx, optimizer, dir + "/" + checkpoint_name(3));
  EXPECT_EQ(resumed.step, 3);
  EXPECT_TRUE(resumed.resharded_from.empty());
  const std::vector<double> losses = train_steps(*ctx, optimizer, c, task, 3, 3);
  for (size_t s = 0; s < losses.size(); ++s) {
    EXPECT_NEAR(losses[s], straight_losses[s], 1e-6 * std::abs(straight_losses[s])) << s;
  }
  for (const auto& [name, value] : ctx->full_parameters()) {
    EXPECT_LE(
        testing::relative_difference(value.to(at::kDouble), straight.at(name).to(at::kDouble)),
        1e-6)
        << name;
  }
}

// A collective that cannot finish (its stream held 8 s by the race amplifier's one-shot
// sleep) under a 2 s timeout: the step fails within seconds, naming the timeout, and the context
// closes within seconds instead of waiting for the device. gpu-check runs it in a process of its
// own.
TEST(ContextOnGpu, WedgedCollectiveFailsTheStepAndTheContextClosesWithinSeconds) {
  MFSDP_REQUIRE_GPU();
  GpuCase c;
  c.units = kFineUnits;
  const TrainingTask task = testing::task_named("tied_lm");
  OneRankWorld world;
  ContextOptions options;
  options.device = "cuda";
  options.collective_timeout = 2s;
  auto ctx =
      Context::create(one_rank_plan(c, "wedged"), fixture_path(task.fixture), world.env, options);
  auto optimizer = std::make_unique<ShardedOptimizer>(*ctx, testing::parity_optimizer(c.optimizer));
  // Inputs and targets on the device first: a copy from pageable memory onto a held stream
  // would block the host.
  const testing::Batch batch = testing::global_batch(task, testing::kParityBatch, 0);
  const at::Tensor inputs = batch.inputs.to(ctx->device());
  const at::Tensor targets = batch.targets.to(ctx->device());
  torch::cuda::synchronize(0);
  delay_next_stream_work_once(8s);  // the first all-gather; the rest queue behind it
  const auto start = std::chrono::steady_clock::now();
  std::string message = "no error";
  try {
    // No loss.item() here: a host read would block inside CUDA until the sleep ends. The
    // optimizer's wait for the reduce-scatters polls, and they wait for the wedged gathers.
    microbatch(*ctx, true);
    const at::Tensor out = ctx->forward({inputs}).toTensor();
    ctx->backward(testing::task_loss(task, out, targets));
    optimizer->step();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime) << e.what();
    message = e.what();
  }
  const auto failed_after = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(contains(message, "timed out after 2000 ms")) << message;
  EXPECT_LT(failed_after, 5s);
  const auto closing = std::chrono::steady_clock::now();
  optimizer.reset();
  ctx.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - closing, 5s);
  // The sleeping host function still holds LibTorch's stream: let it finish before the next
  // test uses the device.
  torch::cuda::synchronize(0);
}

}  // namespace
}  // namespace mfsdp::executor
