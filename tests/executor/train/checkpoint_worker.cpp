// One rank of a checkpoint test run: trains the tied_lm fixture by a plan with AdamW, with
// dropout on the logits (so the default generator's state matters), saving checkpoints as
// asked; rank 0 writes the final full parameters and the loss of every step it ran.
//
//   mfsdp_checkpoint_worker PLAN MODEL STEPS OUT [--dir DIR --save-every N [--keep N]]
//                           [--resume CHECKPOINT [--reseed]]
// with the torchrun environment set. --reseed reseeds the generator after loading, as if the
// checkpoint had not restored it.
#include <cstdlib>
#include <iostream>
#include <optional>

#include "executor/runtime/context.h"
#include "executor/train/checkpoint.h"
#include "executor/train/sharded_optimizer.h"
#include "schema/error.h"
#include "tests/executor/parity/parity_config.h"
#include "tests/executor/parity/training_task.h"

using namespace mfsdp;

namespace {

struct WorkerFlags {
  std::string dir;
  int save_every = 0;
  int keep = 0;
  std::string resume;
  bool reseed = false;
};

std::optional<WorkerFlags> parse_flags(int argc, char** argv, int first) {
  WorkerFlags f;
  for (int i = first; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--reseed") {
      f.reseed = true;
      continue;
    }
    if (i + 1 >= argc) return std::nullopt;
    const std::string value = argv[++i];
    if (flag == "--dir") {
      f.dir = value;
    } else if (flag == "--save-every") {
      f.save_every = std::atoi(value.c_str());
    } else if (flag == "--keep") {
      f.keep = std::atoi(value.c_str());
    } else if (flag == "--resume") {
      f.resume = value;
    } else {
      return std::nullopt;
    }
  }
  if ((f.save_every > 0) == f.dir.empty()) return std::nullopt;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<WorkerFlags> flags = argc >= 5 ? parse_flags(argc, argv, 5) : std::nullopt;
  if (!flags) {
    std::cerr << "usage: mfsdp_checkpoint_worker PLAN MODEL STEPS OUT [--dir DIR --save-every N "
                 "[--keep N]] [--resume CHECKPOINT [--reseed]]\n";
    return 2;
  }
  try {
    const testing::TrainingTask task = testing::task_named("tied_lm");
    const int steps = std::atoi(argv[3]);
    executor::ContextOptions options;
    options.collective_timeout = std::chrono::seconds(60);
    auto ctx = executor::Context::create(argv[1], argv[2], executor::LaunchEnv::from_environment(),
                                         options);
    executor::ShardedOptimizer optimizer(*ctx, testing::parity_optimizer("adamw"));
    torch::manual_seed(100 + ctx->rank());  // each rank its own dropout masks

    executor::TrainingState state;
    state.config = {{"steps", steps}, {"optimizer", "adamw"}};
    state.model_path = argv[2];
    if (!flags->resume.empty()) {
      state.step = executor::load_checkpoint(*ctx, optimizer, flags->resume).step;
      if (flags->reseed) torch::manual_seed(100 + ctx->rank());
      if (ctx->rank() == 0) std::cout << "resumed at step " << state.step << std::endl;
    }

    const int64_t local = testing::kParityBatch / ctx->world_size();
    std::vector<double> losses;
    for (; state.step < steps;) {
      // The batch depends only on the step, so a resumed run sees the same data.
      const testing::Batch global = testing::global_batch(task, testing::kParityBatch, state.step);
      const testing::Batch mine =
          testing::rows(global, ctx->rank() * local, (ctx->rank() + 1) * local);
      executor::microbatch(*ctx, true);
      const at::Tensor logits =
          torch::dropout(ctx->forward({mine.inputs}).toTensor(), 0.1, /*train=*/true);
      const at::Tensor loss = testing::task_loss(task, logits, mine.targets);
      ctx->backward(loss);
      optimizer.step();
      ctx->zero_grad();
      losses.push_back(ctx->mean_over_ranks(loss.item<double>()));
      ++state.step;
      if (flags->save_every > 0 && state.step % flags->save_every == 0) {
        const std::string saved =
            executor::save_checkpoint(*ctx, optimizer, flags->dir, state, flags->keep);
        if (ctx->rank() == 0) std::cout << "saved " << saved << std::endl;
      }
    }
    const auto params = ctx->full_parameters();
    if (ctx->rank() == 0) testing::save_parity_result(argv[4], params, losses);
    return 0;
  } catch (const Error& e) {
    std::cerr << "mfsdp: error: " << e.what() << "\n";
    return e.exit_status();
  } catch (const std::exception& e) {
    std::cerr << "mfsdp: internal error: " << e.what() << "\n";
    return 70;
  }
}
