// Trains examples/bytegpt.pt on examples/tiny_corpus.txt by a plan; one process per rank.
//   train PLAN MODEL CORPUS
#include <fstream>
#include <iostream>
#include <iterator>

#include <torch/torch.h>

#include "executor/runtime/context.h"
#include "executor/train/sharded_optimizer.h"
#include "predict/plan_prediction.h"
#include "schema/error.h"

using namespace mfsdp;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: train PLAN MODEL CORPUS\n";
    return 2;
  }
  try {
    auto ctx = executor::Context::create(argv[1], argv[2], executor::LaunchEnv::from_environment());
    executor::OptimizerConfig adamw;
    adamw.lr = 3e-3;
    executor::ShardedOptimizer optimizer(*ctx, adamw);
    if (ctx->rank() == 0) {  // what the plan says a rank holds, before any step (mfsdp::predict)
      std::cout << "predicted " << predict::rank_state_bytes(ctx->plan(), adamw.kind)
                << " bytes per rank for parameters, gradients, optimizer state and slots\n";
    }

    std::ifstream in(argv[3], std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const int64_t seq = 64, vocab = 256, batch = 8, microbatches = 2;  // batch: per microbatch
    const at::Tensor windows =
        torch::from_blob(text.data(), {static_cast<int64_t>(text.size())}, torch::kUInt8)
            .to(torch::kLong)
            .unfold(0, seq + 1, 1);   // every (input, next byte) window of the corpus
    torch::manual_seed(ctx->rank());  // each rank draws its own samples

    for (int step = 0; step < 50; ++step) {
      double step_loss = 0;
      for (int m = 0; m < microbatches; ++m) {
        executor::microbatch(*ctx, m + 1 == microbatches);
        const at::Tensor rows = windows.index_select(0, torch::randint(windows.size(0), {batch}));
        const at::Tensor logits = ctx->forward({rows.narrow(1, 0, seq)}).toTensor();
        const at::Tensor loss =
            torch::nn::functional::cross_entropy(logits.reshape({-1, vocab}),
                                                 rows.narrow(1, 1, seq).reshape({-1})) /
            microbatches;  // main gradients sum over microbatches
        ctx->backward(loss);
        step_loss += loss.item<double>();
      }
      const double norm = ctx->clip_grad_norm(1.0);
      optimizer.step();
      ctx->zero_grad();
      const double mean_loss = ctx->mean_over_ranks(step_loss);  // every rank calls it
      if (ctx->rank() == 0 && step % 10 == 9) {
        std::cout << "step " << step + 1 << " loss " << mean_loss << " grad norm " << norm << "\n";
      }
    }
    const auto params = ctx->full_parameters();  // a collective too: every rank calls it
    if (ctx->rank() == 0) {
      std::cout << std::boolalpha << params.size()
                << " parameter names, lm_head.weight == wte.weight: "
                << params.at("lm_head.weight").equal(params.at("wte.weight")) << "\n";
    }
    return 0;
  } catch (const Error& e) {
    std::cerr << "train: error: " << e.what() << "\n";
    return e.exit_status();
  }
}
