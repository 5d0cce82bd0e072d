#include "executor/train/probe.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iomanip>
#include <set>
#include <sstream>

#include "executor/comm/collective_probe.h"
#include "executor/comm/nccl_probe.h"
#include "executor/comm/rendezvous.h"
#include "executor/runtime/cuda_runtime.h"
#include "planner/torchscript/reference_compute.h"
#include "schema/error.h"
#include "schema/optimizer.h"

namespace mfsdp::executor {
namespace {

// This rank's compute figures on `device` (a LibTorch device name): the reference GFLOP/s,
// then ns per element per optimizer.
std::vector<double> measure_compute(const std::string& device) {
  std::vector<double> figures = {planner::reference_gflops(device)};
  for (const std::string& optimizer : probed_optimizers()) {
    figures.push_back(planner::optimizer_ns_per_element(optimizer, device));
  }
  return figures;
}

// --device cuda: every rank says whether it can use a GPU of its own (runtime.cpp asks the
// same before training); Error(kRuntime) on every rank, naming the first that cannot.
void check_gpus(Rendezvous& rendezvous, const LaunchEnv& env) {
  const GpuAvailability mine = gpu_availability(env);
  const std::vector<std::string> all = rendezvous.exchange(
      "probe/gpu-available", mine.available ? "" : mine.why_not + "\n" + mine.fix);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    const std::string why = all[r].substr(0, all[r].find('\n'));
    const std::string fix = all[r].substr(all[r].find('\n') + 1);
    fail(ExitCode::kRuntime, "rank " + std::to_string(r) + " cannot probe on a GPU: " + why + "; " +
                                 fix + ", or probe with --device cpu");
  }
}

std::string encode(const std::vector<double>& values) {
  std::ostringstream text;
  text << std::setprecision(17);
  for (double v : values) text << v << ' ';
  return text.str();
}

std::vector<double> decode(const std::string& text) {
  std::vector<double> values;
  std::istringstream in(text);
  for (double v = 0; in >> v;) values.push_back(v);
  return values;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "an unnamed host";
  return name;
}

std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &utc);
  return text;
}

// "measured by mfsdp probe: 2 ranks on host, gloo on the CPU, 1 thread per rank, 2025-01-31";
// on GPUs "..., nccl on NVIDIA H200 GPUs (one per rank), 2025-01-31".
std::string describe(int world, const std::vector<std::string>& hosts, const ProbeBackend& backend,
                     int threads) {
  const std::set<std::string> distinct(hosts.begin(), hosts.end());
  std::ostringstream text;
  text << "measured by mfsdp probe: " << world << " ranks on " << hosts.front();
  if (distinct.size() > 1) text << " and " << distinct.size() - 1 << " other host(s)";
  if (backend.compute_device() == "cpu") {
    text << ", " << backend.name() << " on the CPU, " << threads
         << (threads == 1 ? " thread" : " threads") << " per rank";
  } else {
    text << ", " << backend.name() << " on " << backend.device_name() << " GPUs (one per rank)";
  }
  text << ", " << today_utc();
  return text.str();
}

}  // namespace

const std::vector<std::string>& probed_optimizers() {
  static const std::vector<std::string> names = schema::optimizer_names();
  return names;
}

std::optional<predict::Profile> probe(const ProbeConfig& config, const LaunchEnv& env) {
  if (config.device != "cpu" && config.device != "cuda") {
    fail(ExitCode::kUsage, "mfsdp probe: device must be cpu or cuda, got '" + config.device + "'");
  }
  if (config.threads > 0) at::set_num_threads(config.threads);
  Rendezvous rendezvous(env, config.timeout);
  const std::vector<std::string> hosts = rendezvous.exchange("probe/hosts", host_name());
  std::unique_ptr<ProbeBackend> backend;
  if (config.device == "cuda") {
    check_gpus(rendezvous, env);
    backend = make_nccl_probe_backend(env, rendezvous, config.timeout);
  } else {
    backend = make_gloo_probe_backend(rendezvous, config.timeout);
  }
  const std::string device = backend->compute_device();

  CollectiveProbeOptions options;
  options.sizes = config.sizes;
  options.warmup = config.warmup;
  options.repeats = config.repeats;
  // On a CPU, as in a step, compute runs beside the collectives: it takes the cores their
  // copies need, and a rank that is computing answers a collective late. A GPU's collectives
  // run in NCCL's kernels whatever the host does; what they take from compute is the
  // contention, measured below.
  if (device == "cpu") options.beside = [] { planner::time_reference_matmuls(4); };
  const std::vector<CollectiveSeries> series = probe_collectives(rendezvous, *backend, options);

  // probe_collectives ends in an exchange, which lines the ranks up: they compute together,
  // contending for the cores and memory as in a step.
  std::vector<double> figures = measure_compute(device);
  // Then compute beside collectives: about 50 ms of reference matmuls, beside 4 MiB
  // all-gathers.
  const double flop = 2.0 * 384 * 384 * 384;
  const int matmuls = std::max(4, static_cast<int>(std::ceil(0.05 * figures[0] * 1e9 / flop)));
  figures.push_back(probe_contention(
      rendezvous, *backend, series, int64_t{4} << 20,
      [matmuls, device] { return planner::time_reference_matmuls(matmuls, device); }));
  const std::vector<std::string> computed = rendezvous.exchange("probe/compute", encode(figures));
  if (rendezvous.rank() != 0) return std::nullopt;

  predict::Profile profile;
  profile.name = "probe";
  const int threads = at::get_num_threads();
  profile.description = describe(env.world_size, hosts, *backend, threads);
  profile.backend = backend->name();
  profile.device = backend->device_name();
  // The threads that computed: on a GPU the host's threads only launch its kernels.
  if (device == "cpu") profile.threads_per_rank = threads;
  for (const CollectiveSeries& s : series) {
    predict::CollectiveProfile& collective = profile.collectives.emplace_back();
    collective.kind = s.kind;
    collective.world_size = env.world_size;
    for (const CollectiveSample& sample : s.samples) {
      // The mean: a step pays every call, the slow ones (a rank descheduled) too.
      double sum = 0;
      for (double us : sample.us) sum += us;
      collective.points.push_back({sample.bytes, sum / static_cast<double>(sample.us.size())});
    }
    collective.cost = predict::fit_collective(collective.points);
  }
  std::vector<std::vector<double>> by_figure(2 + probed_optimizers().size());
  for (const std::string& text : computed) {
    const std::vector<double> figures = decode(text);
    for (size_t i = 0; i < by_figure.size() && i < figures.size(); ++i) {
      by_figure[i].push_back(figures[i]);
    }
  }
  profile.compute.reference_gflops = median(by_figure[0]);
  for (size_t i = 0; i < probed_optimizers().size(); ++i) {
    profile.compute.optimizer_ns_per_element[probed_optimizers()[i]] = median(by_figure[i + 1]);
  }
  profile.compute.contention = median(by_figure.back());
  return profile;
}

}  // namespace mfsdp::executor
