#include "planner/torchscript/reference_compute.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/optim.h>
#include <torch/script.h>

#include "schema/error.h"
#include "schema/optimizer.h"

namespace mfsdp::planner {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Waits for the device's queued work (a CPU's is done already): a scalar read back.
void finish(const at::Tensor& t) {
  if (!t.device().is_cpu()) (void)t.sum().item<float>();
}

at::TensorOptions on(const std::string& device) {
  return at::TensorOptions().dtype(at::kFloat).device(c10::Device(device));
}

}  // namespace

double reference_gflops(const std::string& device) {
  constexpr int64_t kSize = 384;
  constexpr int kPerBatch = 4;
  const at::NoGradGuard no_grad;
  at::Generator generator = at::detail::createCPUGenerator(/*seed_in=*/0);
  const at::Tensor a = at::randn({kSize, kSize}, generator, on("cpu")).to(on(device));
  const at::Tensor b = at::randn({kSize, kSize}, generator, on("cpu")).to(on(device));
  at::Tensor c = at::empty({kSize, kSize}, on(device));
  for (int i = 0; i < 3; ++i) at::mm_out(c, a, b);
  finish(c);
  std::vector<double> rates;
  const double flop = 2.0 * kSize * kSize * kSize * kPerBatch;
  for (int batch = 0; batch < 15; ++batch) {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < kPerBatch; ++i) at::mm_out(c, a, b);
    finish(c);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    rates.push_back(flop / seconds / 1e9);
  }
  return median(rates);
}

double time_reference_matmuls(int count, const std::string& device) {
  constexpr int64_t kSize = 384;
  const at::NoGradGuard no_grad;
  at::Generator generator = at::detail::createCPUGenerator(/*seed_in=*/1);
  const at::Tensor a = at::randn({kSize, kSize}, generator, on("cpu")).to(on(device));
  const at::Tensor b = at::randn({kSize, kSize}, generator, on("cpu")).to(on(device));
  at::Tensor c = at::empty({kSize, kSize}, on(device));
  at::mm_out(c, a, b);
  finish(c);
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < count; ++i) at::mm_out(c, a, b);
  finish(c);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double optimizer_ns_per_element(const std::string& optimizer, const std::string& device) {
  constexpr int64_t kElements = int64_t{4} << 20;
  at::Tensor param = at::zeros({kElements}, on(device)).set_requires_grad(true);
  param.mutable_grad() = at::full({kElements}, 1e-3, on(device));
  std::unique_ptr<torch::optim::Optimizer> step;
  const std::vector<at::Tensor> params{param};
  if (optimizer == "sgd") {
    step =
        std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(1e-3).momentum(0.9));
  } else if (optimizer == "adam") {
    step = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-3));
  } else if (optimizer == "adamw") {
    step = std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(1e-3));
  } else {
    fail(ExitCode::kUsage, "no reference timing for optimizer '" + optimizer + "'; use " +
                               schema::optimizer_choices());
  }
  std::vector<double> times;
  for (int i = 0; i < 9; ++i) {
    const Clock::time_point start = Clock::now();
    step->step();
    finish(param);
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
    if (i >= 2) times.push_back(ns / static_cast<double>(kElements));
  }
  return median(times);
}

int set_compute_threads(int threads) {
  const int before = at::get_num_threads();
  at::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto* openblas =
          reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    openblas(threads);
  }
  return before;
}

}  // namespace mfsdp::planner
