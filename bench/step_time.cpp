// Does prefetching pay on the executor? Trains the tied_lm fixture on 2 local ranks by two
// plans that differ only in prefetch depth (forward and backward 0, then 1), same global batch,
// and reports the median step time of each, their ratio, and each rank's memory as measured
// by Context::stats() against the plan's prediction.
//
//   build/bench/mfsdp_bench_step [--batch 32] [--seq 64] [--microbatches 1] [--warmup 3]
//                                [--steps 20] [--rounds 10] [--threads 1] [--pin 0|1]
//
// Without RANK in the environment the binary is the launcher: it plans in-process, hosts the
// rendezvous store and starts 2 copies of itself per run with torchrun's environment. With
// RANK set it is one rank: it trains and prints `step ...` and `stats ...` lines of key=value
// pairs, which the launcher collects. Each round runs both depths in fresh processes, one
// after the other, so slow drift of the machine hits both alike; a step's time is that of
// the slowest rank, and medians pool the timed steps of all rounds.
//
// Over 400 lines: a whole benchmark program (flags, two plans, two trainings, the report).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "executor/comm/rendezvous.h"
#include "executor/launch/process.h"
#include "executor/runtime/context.h"
#include "executor/train/sharded_optimizer.h"
#include "planner/sharding_scope.h"
#include "schema/error.h"
#include "schema/plan_json.h"

namespace {

using namespace mfsdp;
using Clock = std::chrono::steady_clock;

constexpr int kWorld = 2;
const std::vector<std::string> kUnits = {"layers.0", "layers.1", "<root>"};

struct Options {
  int64_t batch = 32;  // global, split evenly across ranks and microbatches
  int64_t seq = 64;
  int64_t microbatches = 1;
  int64_t warmup = 3;
  int64_t steps = 20;
  int64_t rounds = 10;
  int64_t threads = 1;  // intra-op threads per rank; 2 ranks x 1 fill the 2-core machine
  int64_t pin = 0;      // 1: rank r and all its threads run on CPU r only
  std::string plan;     // worker only
};

std::string model_path() {
  return std::string(MFSDP_SOURCE_DIR) + "/tests/fixtures/tied_lm.pt";
}

Options parse_options(int argc, char** argv) {
  Options o;
  const std::map<std::string, int64_t*> numbers = {
      {"--batch", &o.batch},     {"--seq", &o.seq},     {"--microbatches", &o.microbatches},
      {"--warmup", &o.warmup},   {"--steps", &o.steps}, {"--rounds", &o.rounds},
      {"--threads", &o.threads}, {"--pin", &o.pin}};
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) fail(ExitCode::kUsage, flag + " needs a value");
    const std::string value = argv[i + 1];
    if (flag == "--plan") {
      o.plan = value;
      continue;
    }
    const auto it = numbers.find(flag);
    if (it == numbers.end()) fail(ExitCode::kUsage, "unknown flag " + flag);
    size_t used = 0;
    try {
      *it->second = std::stoll(value, &used);
    } catch (const std::exception&) {
    }
    if (used == 0 || used != value.size()) {
      fail(ExitCode::kUsage, flag + " '" + value + "' is not an integer");
    }
  }
  if (o.steps < 1 || o.warmup < 0 || o.rounds < 1 || o.threads < 1 || o.microbatches < 1) {
    fail(ExitCode::kUsage,
         "--steps, --rounds, --threads and --microbatches must be >= 1, --warmup >= 0");
  }
  if (o.batch <= 0 || o.batch % (kWorld * o.microbatches) != 0) {
    fail(ExitCode::kUsage, "--batch " + std::to_string(o.batch) + " must split evenly across " +
                               std::to_string(kWorld) + " ranks x " +
                               std::to_string(o.microbatches) + " microbatches");
  }
  return o;
}

// The fixture's vocabulary and position table, read from the plan's layout.
std::vector<int64_t> param_shape(const schema::Plan& plan, const std::string& name) {
  for (const auto& unit : plan.units) {
    for (const auto& group : unit.groups) {
      for (const auto& p : group.params) {
        if (p.name == name) return p.shape;
      }
    }
  }
  fail(ExitCode::kInternal, "the plan has no parameter " + name);
}

// ---- Worker: one rank --------------------------------------------------------------------

struct TokenBatch {
  at::Tensor inputs, targets;
};

// The global batch of `step`: random tokens, targets shifted by one. The same on every rank,
// and for both depths, so both train on identical data.
TokenBatch global_batch(int64_t batch, int64_t seq, int64_t vocab, int64_t step) {
  torch::Generator gen = at::detail::createCPUGenerator(1000 + step);
  const at::Tensor tokens = torch::randint(vocab, {batch, seq + 1}, gen, torch::kLong);
  return {tokens.narrow(1, 0, seq).contiguous(), tokens.narrow(1, 1, seq).contiguous()};
}

TokenBatch rows(const TokenBatch& b, int64_t begin, int64_t count) {
  return {b.inputs.narrow(0, begin, count), b.targets.narrow(0, begin, count)};
}

double ms_since(Clock::time_point& t0) {
  const auto now = Clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - t0).count();
  t0 = now;
  return ms;
}

int run_worker(const Options& o) {
  at::set_num_threads(static_cast<int>(o.threads));
  if (o.pin) {
    // Before the context starts its stream threads, which inherit the mask.
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(executor::LaunchEnv::from_environment().rank % CPU_SETSIZE, &cpus);
    if (sched_setaffinity(0, sizeof cpus, &cpus) != 0) fail(ExitCode::kRuntime, "cannot pin");
  }
  executor::ContextOptions options;
  options.collective_timeout = std::chrono::seconds(120);
  auto ctx = executor::Context::create(o.plan, model_path(),
                                       executor::LaunchEnv::from_environment(), options);
  const int64_t vocab = param_shape(ctx->plan(), "wte.weight").at(0);
  executor::ShardedOptimizer optimizer(*ctx, executor::OptimizerConfig{});
  const int64_t local = o.batch / ctx->world_size();
  const int64_t micro = local / o.microbatches;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    const TokenBatch mine =
        rows(global_batch(o.batch, o.seq, vocab, step), ctx->rank() * local, local);
    double fwd_ms = 0, bwd_ms = 0, step_loss = 0;
    const auto start = Clock::now();
    auto t0 = start;
    for (int m = 0; m < o.microbatches; ++m) {
      executor::microbatch(*ctx, m + 1 == o.microbatches);
      const TokenBatch part = rows(mine, m * micro, micro);
      const at::Tensor logits = ctx->forward({part.inputs}).toTensor();
      const at::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, vocab}),
                                                                   part.targets.reshape({-1})) /
                              o.microbatches;
      fwd_ms += ms_since(t0);
      ctx->backward(loss);
      bwd_ms += ms_since(t0);
      step_loss += loss.item<double>();
    }
    optimizer.step();
    ctx->zero_grad();
    const double opt_ms = ms_since(t0);
    // Also the step's barrier: the next step starts together on both ranks.
    const double mean_loss = ctx->mean_over_ranks(step_loss);
    const double total_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::printf(
        "step rank=%d step=%d timed=%d ms=%.3f fwd_ms=%.3f bwd_ms=%.3f opt_ms=%.3f "
        "loss=%.9g\n",
        ctx->rank(), step, step >= o.warmup ? 1 : 0, total_ms, fwd_ms, bwd_ms, opt_ms, mean_loss);
  }
  const executor::ContextStats s = ctx->stats();
  std::printf(
      "stats rank=%d sharded_param_bytes=%lld sharded_grad_bytes=%lld slot_bytes=%lld "
      "peak_unsharded_bytes=%lld divergences=%zu\n",
      ctx->rank(), static_cast<long long>(s.sharded_param_bytes),
      static_cast<long long>(s.sharded_grad_bytes), static_cast<long long>(s.slot_bytes),
      static_cast<long long>(s.peak_unsharded_bytes), s.divergences.size());
  std::fflush(stdout);
  return 0;
}

// ---- Launcher ----------------------------------------------------------------------------

// torchrun's environment for one rank: ours, with that rank's launch variables.
std::vector<std::string> rank_environment(int rank, int port, const std::string& secret) {
  return launch::environment_with({{"MASTER_ADDR", "127.0.0.1"},
                                   {"MASTER_PORT", std::to_string(port)},
                                   {"RANK", std::to_string(rank)},
                                   {"WORLD_SIZE", std::to_string(kWorld)},
                                   {"LOCAL_RANK", std::to_string(rank)},
                                   {"LOCAL_WORLD_SIZE", std::to_string(kWorld)},
                                   {"MFSDP_AGENT_STORE", "1"},
                                   {"MFSDP_RDZV_SECRET", secret},
                                   {"MFSDP_RDZV_SECRET_FILE", ""}});
}

// Starts kWorld copies of this binary (no shell) against a store hosted here, and collects
// their output; ranks still running after `limit` are killed.
std::vector<launch::Finished> run_ranks(const std::vector<std::string>& args,
                                        std::chrono::seconds limit) {
  executor::StoreHost host(0);
  std::vector<std::string> argv = {std::filesystem::read_symlink("/proc/self/exe").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<launch::ChildProcess> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back(argv, rank_environment(rank, host.port(), host.secret()));
  }
  return launch::finish_all(ranks, limit);
}

using Fields = std::map<std::string, std::string>;

// The lines of `text` that start with `tag`, as key=value maps.
std::vector<Fields> tagged_lines(const std::string& text, const std::string& tag) {
  std::vector<Fields> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string word;
    if (!(words >> word) || word != tag) continue;
    Fields fields;
    while (words >> word) {
      const auto eq = word.find('=');
      if (eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
    }
    out.push_back(std::move(fields));
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The q-quantile by nearest rank: 0 is the minimum.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string one, five;
  f >> one >> five;
  return one + " " + five;
}

struct Config {
  int depth = 0;
  std::string plan_path;
  schema::Plan plan;
  // Per timed step, the slowest rank's time: a step is done when every rank is.
  std::vector<double> step_ms, fwd_ms, bwd_ms, opt_ms;
  std::vector<double> round_median_ms;  // one per round, to show the spread between runs
  std::vector<double> losses;           // every step of the last round, rank 0
  std::vector<Fields> stats;            // per rank, last round
};

schema::Plan make_plan(int depth) {
  planner::ShardedModel model = planner::ShardedModel::load(model_path());
  schema::Policy policy;
  policy.forward_prefetch = depth;
  policy.backward_prefetch = depth;
  planner::ShardingScope scope(model, {kWorld, kWorld, 1}, policy);
  for (const auto& unit : kUnits) scope.fully_shard(unit);
  return scope.finalize();
}

void run_config(Config& c, const Options& o) {
  const std::vector<std::string> args = {"--plan",         c.plan_path,
                                         "--batch",        std::to_string(o.batch),
                                         "--seq",          std::to_string(o.seq),
                                         "--microbatches", std::to_string(o.microbatches),
                                         "--warmup",       std::to_string(o.warmup),
                                         "--steps",        std::to_string(o.steps),
                                         "--threads",      std::to_string(o.threads),
                                         "--pin",          std::to_string(o.pin)};
  const std::vector<launch::Finished> ranks = run_ranks(args, std::chrono::seconds(900));
  for (int r = 0; r < kWorld; ++r) {
    if (!ranks[r].status.ok()) {
      fail(ExitCode::kRuntime, "depth " + std::to_string(c.depth) + ": rank " + std::to_string(r) +
                                   " " + ranks[r].status.describe() + "\n" + ranks[r].err);
    }
  }
  std::vector<std::vector<Fields>> steps(kWorld);
  c.stats.clear();
  for (int r = 0; r < kWorld; ++r) {
    steps[r] = tagged_lines(ranks[r].out, "step");
    c.stats.push_back(tagged_lines(ranks[r].out, "stats").at(0));
  }
  c.losses.clear();
  std::vector<double> this_round;
  for (size_t i = 0; i < steps[0].size(); ++i) {
    c.losses.push_back(std::stod(steps[0][i].at("loss")));
    if (steps[0][i].at("timed") != "1") continue;
    double ms = 0, fwd = 0, bwd = 0, opt = 0;
    for (int r = 0; r < kWorld; ++r) {
      const Fields& f = steps[r].at(i);
      ms = std::max(ms, std::stod(f.at("ms")));
      fwd = std::max(fwd, std::stod(f.at("fwd_ms")));
      bwd = std::max(bwd, std::stod(f.at("bwd_ms")));
      opt = std::max(opt, std::stod(f.at("opt_ms")));
    }
    this_round.push_back(ms);
    c.step_ms.push_back(ms);
    c.fwd_ms.push_back(fwd);
    c.bwd_ms.push_back(bwd);
    c.opt_ms.push_back(opt);
  }
  c.round_median_ms.push_back(median(this_round));
}

int run_launcher(const Options& o) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("mfsdp_bench_step_" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(dir);
  std::vector<Config> configs(2);
  for (int d = 0; d < 2; ++d) {
    configs[d].depth = d;
    configs[d].plan = make_plan(d);
    configs[d].plan_path = dir + "/tied_lm.prefetch" + std::to_string(d) + ".plan.json";
    schema::write_file_atomically(configs[d].plan_path, schema::dump_plan(configs[d].plan));
  }
  const int64_t block_size = param_shape(configs[0].plan, "wpe.weight").at(0);
  if (o.seq < 1 || o.seq > block_size) {
    fail(ExitCode::kUsage, "--seq " + std::to_string(o.seq) + " must be 1.." +
                               std::to_string(block_size) + " (the fixture's position table)");
  }
  std::printf(
      "mfsdp_bench_step: tied_lm.pt (units layers.0, layers.1, <root>), %d ranks, "
      "global batch %s x %s tokens, %s microbatch(es), %s warmup + %s timed steps, "
      "%s round(s), %s thread(s) per rank\n",
      kWorld, std::to_string(o.batch).c_str(), std::to_string(o.seq).c_str(),
      std::to_string(o.microbatches).c_str(), std::to_string(o.warmup).c_str(),
      std::to_string(o.steps).c_str(), std::to_string(o.rounds).c_str(),
      std::to_string(o.threads).c_str());
  std::printf("load average before: %s\n", load_average().c_str());
  std::fflush(stdout);
  for (int round = 0; round < o.rounds; ++round) {
    for (Config& c : configs) run_config(c, o);
  }
  std::printf("load average after:  %s\n\n", load_average().c_str());

  std::printf("%8s %10s %10s %10s %10s %10s %10s %10s\n", "prefetch", "step_ms", "min_ms", "p90_ms",
              "fwd_ms", "bwd_ms", "opt_ms", "steps");
  for (const Config& c : configs) {
    std::printf("%8d %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10zu\n", c.depth, median(c.step_ms),
                quantile(c.step_ms, 0.0), quantile(c.step_ms, 0.9), median(c.fwd_ms),
                median(c.bwd_ms), median(c.opt_ms), c.step_ms.size());
  }
  std::printf("ratio depth1/depth0 (median step): %.3f\n",
              median(configs[1].step_ms) / median(configs[0].step_ms));
  std::printf("per round, median ms depth0 / depth1 (ratio):");
  for (size_t r = 0; r < configs[0].round_median_ms.size(); ++r) {
    const double d0 = configs[0].round_median_ms[r], d1 = configs[1].round_median_ms[r];
    std::printf("%s %.1f / %.1f (%.2f)", r ? "," : "", d0, d1, d1 / d0);
  }
  std::printf("\n");
  const bool same_losses = configs[0].losses == configs[1].losses;
  std::printf("losses identical across depths: %s (final %.6f vs %.6f)\n\n",
              same_losses ? "yes" : "no", configs[0].losses.back(), configs[1].losses.back());

  std::printf("memory per rank, measured (Context::stats, rank 0) / planned:\n");
  std::printf("%8s %22s %22s %22s %12s\n", "prefetch", "sharded_param_bytes",
              "peak_unsharded_bytes", "slot_bytes", "divergences");
  for (const Config& c : configs) {
    const Fields& s = c.stats[0];
    for (int r = 1; r < kWorld; ++r) {
      if (c.stats[r].at("sharded_param_bytes") != s.at("sharded_param_bytes") ||
          c.stats[r].at("peak_unsharded_bytes") != s.at("peak_unsharded_bytes") ||
          c.stats[r].at("slot_bytes") != s.at("slot_bytes")) {
        std::printf("note: rank %d's stats differ from rank 0's\n", r);
      }
    }
    const schema::Memory& m = c.plan.memory;
    auto pair = [](const std::string& measured, int64_t planned) {
      return measured + " / " + std::to_string(planned);
    };
    std::printf("%8d %22s %22s %22s %12s\n", c.depth,
                pair(s.at("sharded_param_bytes"), m.sharded_param_bytes).c_str(),
                pair(s.at("peak_unsharded_bytes"), m.peak_unsharded_bytes).c_str(),
                pair(s.at("slot_bytes"), m.slot_bytes).c_str(), s.at("divergences").c_str());
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse_options(argc, argv);
    if (std::getenv("RANK") != nullptr) {
      if (options.plan.empty()) fail(ExitCode::kUsage, "a rank needs --plan");
      return run_worker(options);
    }
    return run_launcher(options);
  } catch (const Error& e) {
    std::cerr << "mfsdp_bench_step: error: " << e.what() << "\n";
    return e.exit_status();
  } catch (const std::exception& e) {
    std::cerr << "mfsdp_bench_step: internal error: " << e.what() << "\n";
    return 70;
  }
}
