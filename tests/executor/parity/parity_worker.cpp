// One rank of a parity run: trains a fixture with the executor, by a plan, and rank 0 writes
// the final full parameters and the loss curve for the test to compare.
//
//   mfsdp_parity_worker TASK PLAN MODEL STEPS MICROBATCHES OPTIMIZER OUT [flags]
// with the torchrun environment set. Flags, for the failure tests:
//   --strict-order            fail when the first microbatch leaves the plan's unit order
//   --clip-grad-norm X        clip the global gradient norm to X before each optimizer step
//   --die-at-step K --die-rank R
//                             rank R exits abruptly after step K's first forward
//   --timeout-ms N            collective timeout (default 60 s)
//   --plan-for-rank R PATH    rank R trains by PATH instead of PLAN
//   --evaluate                before each step, evaluate the rank's batch (forward only);
//                             rank 0 writes those losses to OUT.eval
//   --seed N                  seed LibTorch's CPU generator (dropout) with N + rank first
#include <cstdlib>
#include <iostream>
#include <optional>

#include "executor/runtime/context.h"
#include "executor/train/sharded_optimizer.h"
#include "schema/error.h"
#include "tests/executor/parity/parity_config.h"
#include "tests/executor/parity/training_task.h"

using namespace mfsdp;

namespace {

constexpr const char* kUsage =
    "usage: mfsdp_parity_worker TASK PLAN MODEL STEPS MICROBATCHES OPTIMIZER OUT "
    "[--strict-order] [--clip-grad-norm X] [--die-at-step K --die-rank R] [--timeout-ms N] "
    "[--plan-for-rank R PATH] [--evaluate] [--seed N]\n";

struct WorkerFlags {
  bool strict_order = false;
  bool evaluate = false;
  std::optional<double> clip_grad_norm;
  int die_at_step = -1;
  int die_rank = -1;
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  int plan_for_rank = -1;
  std::string rank_plan;
  std::optional<uint64_t> seed;
};

// Flags after the positional arguments; nullopt on anything unknown or incomplete.
std::optional<WorkerFlags> parse_flags(int argc, char** argv, int first) {
  WorkerFlags f;
  for (int i = first; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool is_switch = flag == "--strict-order" || flag == "--evaluate";
    const int values = is_switch ? 0 : flag == "--plan-for-rank" ? 2 : 1;
    if (i + values >= argc) return std::nullopt;
    const char* v = argv[i + 1];
    if (flag == "--strict-order") {
      f.strict_order = true;
    } else if (flag == "--evaluate") {
      f.evaluate = true;
    } else if (flag == "--clip-grad-norm") {
      f.clip_grad_norm = std::atof(v);
    } else if (flag == "--die-at-step") {
      f.die_at_step = std::atoi(v);
    } else if (flag == "--die-rank") {
      f.die_rank = std::atoi(v);
    } else if (flag == "--timeout-ms") {
      f.timeout = std::chrono::milliseconds(std::atoll(v));
    } else if (flag == "--seed") {
      f.seed = std::strtoull(v, nullptr, 10);
    } else if (flag == "--plan-for-rank") {
      f.plan_for_rank = std::atoi(v);
      f.rank_plan = argv[i + 2];
    } else {
      return std::nullopt;
    }
    i += values;
  }
  if ((f.die_at_step < 0) != (f.die_rank < 0)) return std::nullopt;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<WorkerFlags> flags = argc >= 8 ? parse_flags(argc, argv, 8) : std::nullopt;
  if (!flags) {
    std::cerr << kUsage;
    return 2;
  }
  try {
    const testing::TrainingTask task = testing::task_named(argv[1]);
    const int steps = std::atoi(argv[4]);
    const int microbatches = std::atoi(argv[5]);
    executor::ContextOptions options;
    options.collective_timeout = flags->timeout;
    options.strict_order = flags->strict_order;
    const executor::LaunchEnv env = executor::LaunchEnv::from_environment();
    const std::string plan = env.rank == flags->plan_for_rank ? flags->rank_plan : argv[2];
    auto ctx = executor::Context::create(plan, argv[3], env, options);
    if (flags->seed) torch::manual_seed(*flags->seed + static_cast<uint64_t>(ctx->rank()));
    executor::ShardedOptimizer optimizer(*ctx, testing::parity_optimizer(argv[6]));
    const int64_t world = ctx->world_size();
    const int64_t local = testing::kParityBatch / world;
    const int64_t micro = local / microbatches;
    std::vector<double> losses, eval_losses;
    for (int step = 0; step < steps; ++step) {
      const testing::Batch global = testing::global_batch(task, testing::kParityBatch, step);
      const testing::Batch mine =
          testing::rows(global, ctx->rank() * local, (ctx->rank() + 1) * local);
      if (flags->evaluate) {
        const at::Tensor out = ctx->evaluate({mine.inputs}).toTensor();
        const double loss = testing::task_loss(task, out, mine.targets).item<double>();
        eval_losses.push_back(ctx->mean_over_ranks(loss));
      }
      double step_loss = 0;
      for (int m = 0; m < microbatches; ++m) {
        executor::microbatch(*ctx, m + 1 == microbatches);
        const testing::Batch part = testing::rows(mine, m * micro, (m + 1) * micro);
        const at::Tensor out = ctx->forward({part.inputs}).toTensor();
        if (step == flags->die_at_step && m == 0 && ctx->rank() == flags->die_rank) {
          // Mid-step, with the others about to wait on this rank's backward collectives.
          std::_Exit(9);
        }
        const at::Tensor loss = testing::task_loss(task, out, part.targets) / microbatches;
        ctx->backward(loss);
        step_loss += loss.item<double>();
      }
      if (flags->clip_grad_norm) ctx->clip_grad_norm(*flags->clip_grad_norm);
      optimizer.step();
      ctx->zero_grad();
      losses.push_back(ctx->mean_over_ranks(step_loss));
    }
    const auto params = ctx->full_parameters();
    if (ctx->rank() == 0) {
      testing::save_parity_result(argv[7], params, losses);
      if (flags->evaluate)
        testing::save_parity_result(std::string(argv[7]) + ".eval", {}, eval_losses);
    }
    const executor::ContextStats stats = ctx->stats();
    std::cout << "rank " << ctx->rank() << " sharded_param_bytes " << stats.sharded_param_bytes
              << " peak_unsharded_bytes " << stats.peak_unsharded_bytes << " divergences "
              << stats.divergences.size() << std::endl;
    return 0;
  } catch (const Error& e) {
    std::cerr << "mfsdp: error: " << e.what() << "\n";
    return e.exit_status();
  } catch (const std::exception& e) {
    std::cerr << "mfsdp: internal error: " << e.what() << "\n";
    return 70;
  }
}
