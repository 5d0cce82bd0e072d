// How much does planning add to loading? Generates deep TorchScript models (N blocks of
// norm + two linears, each a module with its own forward), then times torch::jit::load of
// the file against the whole `mfsdp plan` pipeline on it (load, extract, scope with every
// block plus the model, finalize, serialise). Goal: planning adds <= 20 % to load time and
// scales linearly in N.
//
//   build/bench/mfsdp_bench_plan [--blocks 200,2000] [--width 16] [--repeats 5]
#include <torch/script.h>

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "planner/sharding_scope.h"
#include "planner/torchscript/torch_model.h"
#include "schema/digest.h"
#include "schema/plan_json.h"

namespace {

using torch::jit::Module;

class ModelFactory {
 public:
  explicit ModelFactory(int64_t width) : width_(width) {}

  Module build(int blocks) {
    Module root("__torch__.bench.Deep", cu_, true);
    std::ostringstream src;
    src << "def forward(self, x):\n";
    for (int i = 0; i < blocks; ++i) {
      root.register_module("b" + std::to_string(i), block());
      src << "    x = self.b" << i << ".forward(x)\n";
    }
    src << "    return x\n";
    root.define(src.str());
    return root;
  }

 private:
  // Instances of one kind share a class type, as in a scripted model.
  Module instance(c10::ClassTypePtr& type, const char* name) {
    if (type) return Module(cu_, type);
    Module m(std::string("__torch__.bench.") + name, cu_, true);
    type = m.type();
    return m;
  }

  Module linear() {
    const bool first = !linear_type_;
    Module m = instance(linear_type_, "Linear");
    m.register_parameter("weight", torch::randn({width_, width_}), false);
    m.register_parameter("bias", torch::zeros({width_}), false);
    if (first) {
      m.define("def forward(self, x):\n    return torch.matmul(x, self.weight) + self.bias\n");
    }
    return m;
  }

  Module norm() {
    const bool first = !norm_type_;
    Module m = instance(norm_type_, "Norm");
    m.register_parameter("weight", torch::ones({width_}), false);
    m.register_parameter("bias", torch::zeros({width_}), false);
    if (first) {
      m.define(
          "def forward(self, x):\n    return torch.layer_norm(x, [x.size(-1)], self.weight, "
          "self.bias, 1e-5, False)\n");
    }
    return m;
  }

  Module block() {
    const bool first = !block_type_;
    Module m = instance(block_type_, "Block");
    m.register_module("norm", norm());
    m.register_module("fc1", linear());
    m.register_module("fc2", linear());
    if (first) {
      m.define(
          "def forward(self, x):\n    return x + "
          "self.fc2.forward(torch.relu(self.fc1.forward(self.norm.forward(x))))\n");
    }
    return m;
  }

  int64_t width_;
  std::shared_ptr<torch::jit::CompilationUnit> cu_ =
      std::make_shared<torch::jit::CompilationUnit>();
  c10::ClassTypePtr linear_type_, norm_type_, block_type_;
};

double median(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::vector<int> parse_list(const char* text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {200, 2000};
  int64_t width = 16;
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--blocks")) sizes = parse_list(argv[i + 1]);
    if (!std::strcmp(argv[i], "--width")) width = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--repeats")) repeats = std::atoi(argv[i + 1]);
  }
  torch::manual_seed(0);
  struct Breakdown {
    int blocks;
    double extract_ms, hash_ms, finalize_ms, serialise_ms;
  };
  std::vector<Breakdown> breakdown;
  std::printf("%8s %8s %10s %10s %10s %10s %12s\n", "blocks", "modules", "file_KiB", "load_ms",
              "plan_ms", "added_%", "added_us/blk");
  for (int blocks : sizes) {
    const std::string path =
        "/tmp/mfsdp_bench_" + std::to_string(getpid()) + "_" + std::to_string(blocks) + ".pt";
    ModelFactory(width).build(blocks).save(path);
    FILE* f = std::fopen(path.c_str(), "rb");
    std::fseek(f, 0, SEEK_END);
    const long bytes = std::ftell(f);
    std::fclose(f);

    size_t modules = 0;
    // Every phase is timed directly, in the order `mfsdp plan` runs them. Loading includes
    // destroying the module, which the planner does too once it has extracted its IR.
    std::vector<double> load, extract, hash, finalize, serialise;
    for (int r = 0; r < repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      auto elapsed = [&] {
        const auto now = std::chrono::steady_clock::now();
        const double ms = std::chrono::duration<double, std::milli>(now - t0).count();
        t0 = now;
        return ms;
      };
      auto lap = [&](std::vector<double>& into) { into.push_back(elapsed()); };
      double load_ms = 0;
      mfsdp::planner::ModelIR ir;
      {
        torch::jit::Module module = torch::jit::load(path);
        load_ms += elapsed();
        ir = mfsdp::planner::extract_model(module, path);
        lap(extract);
      }
      load.push_back(load_ms + elapsed());
      mfsdp::planner::ShardedModel model(std::move(ir), path, mfsdp::schema::sha256_file_hex(path));
      lap(hash);
      modules = model.ir().modules.size();
      mfsdp::planner::ShardingScope scope(model, {8, 8, 1}, {});
      for (int i = 0; i < blocks; ++i) scope.fully_shard("b" + std::to_string(i));
      scope.fully_shard("<root>");
      const auto plan = scope.finalize();
      lap(finalize);
      const std::string text = mfsdp::schema::dump_plan(plan);
      if (text.empty()) std::abort();
      lap(serialise);
    }
    const double load_ms = median(load);
    const double added = median(extract) + median(hash) + median(finalize) + median(serialise);
    breakdown.push_back(
        {blocks, median(extract), median(hash), median(finalize), median(serialise)});
    std::remove(path.c_str());
    std::printf("%8d %8zu %10ld %10.1f %10.1f %10.1f %12.1f\n", blocks, modules, bytes / 1024,
                load_ms, load_ms + added, 100.0 * added / load_ms, 1000.0 * added / blocks);
  }
  std::printf("\nwhere the added time goes (ms, medians):\n%8s %10s %10s %10s %10s\n", "blocks",
              "extract", "sha256", "scope", "serialise");
  for (const auto& b : breakdown) {
    std::printf("%8d %10.1f %10.1f %10.1f %10.1f\n", b.blocks, b.extract_ms, b.hash_ms,
                b.finalize_ms, b.serialise_ms);
  }
  return 0;
}
