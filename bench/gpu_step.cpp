// What do mfsdp's hooks, streams and sharded optimizer cost at world size 1? Trains a
// TorchScript GPT (token ids in, logits out, `wte.weight` the embedding) two ways on the same
// device and the same batches: plain LibTorch (the module's parameters, AdamW) and mfsdp's
// context by a one-rank plan (`mfsdp plan MODEL --world-size 1 ...`). Runs the two in turns,
// `--rounds` times, and prints each one's median step time, the ratio, the first losses (they
// start from the same weights, so they agree) and, on a GPU, each one's peak allocated memory.
//
//   build/bench/mfsdp_bench_gpu PLAN.json MODEL.pt [--device cuda|cpu] [--batch 8] [--seq 128]
//                               [--steps 10] [--warmup 3] [--rounds 2] [--lr 1e-4]
//   build/bench/mfsdp_bench_gpu --reference [--device cuda|cpu]
//
// --reference prints only the reference matmul's GFLOP/s on the device (what mfsdp probe
// records as compute.reference_gflops): over a plan's trace.calibration_gflops it is the
// --compute-scale that takes a CPU trace to this GPU where mfsdp probe cannot run (one GPU).
//
// scripts/gpu-check runs it on the GPU (docs/gpu.md); reported, never asserted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/script.h>
#include <torch/torch.h>

#include "executor/comm/rendezvous.h"
#include "executor/runtime/context.h"
#include "executor/runtime/torch_cuda_stream.h"
#include "executor/train/sharded_optimizer.h"
#include "planner/torchscript/reference_compute.h"
#include "schema/error.h"

namespace {

using namespace mfsdp;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string plan, model, device = "cuda";
  int64_t batch = 8, seq = 128;
  int steps = 10, warmup = 3, rounds = 2;
  double lr = 1e-4;
  bool reference = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "mfsdp_bench_gpu: " << why
            << "\nusage: mfsdp_bench_gpu PLAN.json MODEL.pt [--device cuda|cpu] [--batch N] "
               "[--seq N] [--steps N] [--warmup N] [--rounds N] [--lr X]\n"
               "       mfsdp_bench_gpu --reference [--device cuda|cpu]\n";
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--device")
      o.device = value();
    else if (a == "--reference")
      o.reference = true;
    else if (a == "--batch")
      o.batch = std::stoll(value());
    else if (a == "--seq")
      o.seq = std::stoll(value());
    else if (a == "--steps")
      o.steps = std::stoi(value());
    else if (a == "--warmup")
      o.warmup = std::stoi(value());
    else if (a == "--rounds")
      o.rounds = std::stoi(value());
    else if (a == "--lr")
      o.lr = std::stod(value());
    else if (a.rfind("--", 0) == 0)
      usage("unknown option " + a);
    else
      positional.push_back(a);
  }
  if (o.reference && positional.empty()) return o;
  if (positional.size() != 2) usage("give PLAN.json and MODEL.pt");
  o.plan = positional[0];
  o.model = positional[1];
  if (o.steps < 1 || o.rounds < 1 || o.batch < 1 || o.seq < 1) usage("counts must be positive");
  return o;
}

struct Batch {
  at::Tensor inputs, targets;
};

// The same batches for both: random tokens from a seeded CPU generator.
Batch batch_for(int step, const Options& o, int64_t vocab, const at::Device& device) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  const at::Tensor tokens =
      at::randint(vocab, {o.batch, o.seq + 1}, gen, at::TensorOptions().dtype(at::kLong));
  return {tokens.narrow(1, 0, o.seq).contiguous().to(device),
          tokens.narrow(1, 1, o.seq).contiguous().to(device)};
}

at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, vocab}).to(at::kFloat),
                                              targets.reshape({-1}));
}

void synchronize(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

struct Result {
  std::vector<double> step_ms;  // timed steps of every round
  std::vector<double> losses;   // the first round's
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

executor::OptimizerConfig adamw(const Options& o) {
  executor::OptimizerConfig c;
  c.kind = "adamw";
  c.lr = o.lr;
  return c;
}

// Times `step` (one training step on a batch, returning its loss) over the warm-up and timed
// steps, each between two device synchronisations; keeps the first round's losses.
void timed_steps(const Options& o, const at::Device& device, int64_t vocab, Result& r,
                 const std::function<at::Tensor(const Batch&)>& step) {
  const bool first = r.losses.empty();
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    const Batch b = batch_for(s, o, vocab, device);
    synchronize(device);
    const auto start = Clock::now();
    const double loss = step(b).item<double>();
    synchronize(device);
    if (s >= o.warmup) {
      r.step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    if (first) r.losses.push_back(loss);
  }
}

void plain_round(const Options& o, const at::Device& device, int64_t vocab, Result& r) {
  torch::jit::Module module = torch::jit::load(o.model, device);
  module.train();
  std::vector<at::Tensor> params;
  for (const at::Tensor& p : module.parameters()) params.push_back(p);
  auto optimizer = executor::make_optimizer(params, adamw(o));
  timed_steps(o, device, vocab, r, [&](const Batch& b) {
    optimizer->zero_grad();
    const at::Tensor loss = lm_loss(module.forward({b.inputs}).toTensor(), b.targets, vocab);
    loss.backward();
    optimizer->step();
    return loss;
  });
}

void mfsdp_round(const Options& o, const at::Device& device, int64_t vocab, Result& r) {
  executor::StoreHost host(0);
  executor::LaunchEnv env;
  env.master_port = host.port();
  env.agent_store = true;
  env.secret = host.secret();
  executor::ContextOptions options;
  options.device = o.device;
  auto ctx = executor::Context::create(o.plan, o.model, env, options);
  executor::ShardedOptimizer optimizer(*ctx, adamw(o));
  timed_steps(o, device, vocab, r, [&](const Batch& b) {
    executor::microbatch(*ctx, true);
    const at::Tensor loss = lm_loss(ctx->forward({b.inputs}).toTensor(), b.targets, vocab);
    ctx->backward(loss);
    optimizer.step();
    ctx->zero_grad();
    return loss;
  });
}

// LibTorch's caching allocator's peak since the last reset (-1 on the CPU).
int64_t peak_mib(const at::Device& device) {
  return device.is_cuda() ? executor::torch_cuda_memory(device.index()).peak_allocated >> 20 : -1;
}

void reset_peak(const at::Device& device) {
  if (device.is_cuda()) executor::reset_torch_cuda_peak(device.index());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::logic_error&) {  // std::stoll and friends on a word
    usage("a count or rate is not a number");
  }
  try {
    const at::Device device(o.device == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(o.device));
    if (device.is_cuda() && !torch::cuda::is_available()) {
      std::cerr << "mfsdp_bench_gpu: --device cuda, but LibTorch sees no GPU\n";
      return 2;
    }
    if (o.reference) {
      std::printf("reference matmul: %.1f GFLOP/s on %s\n", planner::reference_gflops(device.str()),
                  device.str().c_str());
      return 0;
    }
    int64_t vocab = 0;
    for (const auto& p : torch::jit::load(o.model).named_parameters()) {
      if (p.name == "wte.weight") vocab = p.value.size(0);
    }
    if (vocab == 0) usage(o.model + " has no parameter wte.weight (a GPT's token embedding)");
    Result plain, sharded;
    int64_t plain_peak = -1, sharded_peak = -1;
    for (int round = 0; round < o.rounds; ++round) {
      reset_peak(device);
      plain_round(o, device, vocab, plain);
      plain_peak = std::max(plain_peak, peak_mib(device));
      reset_peak(device);
      mfsdp_round(o, device, vocab, sharded);
      sharded_peak = std::max(sharded_peak, peak_mib(device));
    }
    const double a = median(plain.step_ms), b = median(sharded.step_ms);
    std::printf("%-14s %10s %10s %12s %14s\n", "trainer", "step_ms", "min_ms", "peak_MiB",
                "first_losses");
    auto line = [](const char* name, const Result& r, int64_t peak) {
      std::printf("%-14s %10.2f %10.2f %12lld %9.5f %.5f\n", name, median(r.step_ms),
                  *std::min_element(r.step_ms.begin(), r.step_ms.end()),
                  static_cast<long long>(peak), r.losses.at(0),
                  r.losses.size() > 1 ? r.losses.at(1) : r.losses.at(0));
    };
    line("plain-libtorch", plain, plain_peak);
    line("mfsdp", sharded, sharded_peak);
    std::printf(
        "mfsdp/plain step time: %.3f (batch %lld x %lld on %s, %d timed steps x %d rounds)\n",
        a > 0 ? b / a : 0.0, static_cast<long long>(o.batch), static_cast<long long>(o.seq),
        device.str().c_str(), o.steps, o.rounds);
    return 0;
  } catch (const Error& e) {
    std::cerr << "mfsdp_bench_gpu: " << e.what() << "\n";
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::cerr << "mfsdp_bench_gpu: " << e.what() << "\n";
    return 1;
  }
}
