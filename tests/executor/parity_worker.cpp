// One rank of a parity run: trains a fixture with the executor, by a plan, and rank 0 writes
// the final full parameters and the loss curve for the test to compare.
//
//   mfsdp_parity_worker TASK PLAN MODEL STEPS MICROBATCHES OPTIMIZER OUT
// with the torchrun environment set.
#include <cstdlib>
#include <iostream>

#include "executor/runtime/context.h"
#include "executor/train/sharded_optimizer.h"
#include "schema/error.h"
#include "tests/executor/parity_config.h"
#include "tests/executor/training_task.h"

using namespace mfsdp;

int main(int argc, char** argv) {
  if (argc != 8) {
    std::cerr << "usage: mfsdp_parity_worker TASK PLAN MODEL STEPS MICROBATCHES OPTIMIZER OUT\n";
    return 2;
  }
  try {
    const testing::TrainingTask task = testing::task_named(argv[1]);
    const int steps = std::atoi(argv[4]);
    const int microbatches = std::atoi(argv[5]);
    executor::ContextOptions options;
    options.collective_timeout = std::chrono::seconds(60);
    auto ctx = executor::Context::create(argv[2], argv[3], executor::LaunchEnv::from_environment(),
                                         options);
    executor::ShardedOptimizer optimizer(*ctx, testing::parity_optimizer(argv[6]));
    const int64_t world = ctx->world_size();
    const int64_t local = testing::kParityBatch / world;
    const int64_t micro = local / microbatches;
    std::vector<double> losses;
    for (int step = 0; step < steps; ++step) {
      const testing::Batch global = testing::global_batch(task, testing::kParityBatch, step);
      const testing::Batch mine =
          testing::rows(global, ctx->rank() * local, (ctx->rank() + 1) * local);
      double step_loss = 0;
      for (int m = 0; m < microbatches; ++m) {
        executor::microbatch(*ctx, m + 1 == microbatches);
        const testing::Batch part = testing::rows(mine, m * micro, (m + 1) * micro);
        const at::Tensor out = ctx->model().forward({part.inputs}).toTensor();
        const at::Tensor loss = testing::task_loss(task, out, part.targets) / microbatches;
        ctx->backward(loss);
        step_loss += loss.item<double>();
      }
      optimizer.step();
      ctx->zero_grad();
      losses.push_back(ctx->mean_over_ranks(step_loss));
    }
    const auto params = ctx->full_parameters();
    if (ctx->rank() == 0) testing::save_parity_result(argv[7], params, losses);
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
