#include "executor/comm/collective_probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <sstream>
#include <thread>

#include "executor/comm/rendezvous.h"
#include "executor/runtime/cpu_stream.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

using Clock = std::chrono::steady_clock;

// A Gloo communicator on its CPU stream; the communicator goes first, since the work it
// queued runs on the stream.
class GlooLane final : public ProbeLane {
 public:
  GlooLane(std::unique_ptr<Stream> stream, std::unique_ptr<GlooCommunicator> comm)
      : stream_(std::move(stream)), comm_(std::move(comm)) {}
  Communicator& comm() override { return *comm_; }
  int64_t time(const std::function<void()>& issue) override {
    const auto start = Clock::now();
    issue();
    comm_->stream().record()->wait();
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  }

 private:
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<GlooCommunicator> comm_;
};

class GlooProbeBackend final : public ProbeBackend {
 public:
  GlooProbeBackend(Rendezvous& rendezvous, std::chrono::milliseconds timeout)
      : rendezvous_(rendezvous), timeout_(timeout) {}
  const std::string& name() const override { return name_; }
  const std::string& compute_device() const override { return cpu_; }
  const std::string& device_name() const override { return cpu_; }
  std::vector<std::unique_ptr<ProbeLane>> lanes(const std::vector<std::string>& names) override {
    std::vector<int> group(rendezvous_.world_size());
    std::iota(group.begin(), group.end(), 0);
    std::vector<std::unique_ptr<ProbeLane>> made;
    for (const std::string& name : names) {
      std::unique_ptr<Stream> stream = make_cpu_stream("probe " + name);
      std::unique_ptr<GlooCommunicator> comm =
          rendezvous_.gloo_communicator("probe/" + name, group, *stream, timeout_);
      made.push_back(std::make_unique<GlooLane>(std::move(stream), std::move(comm)));
    }
    return made;
  }
  std::shared_ptr<float> ones(size_t count) override {
    auto values = std::make_shared<std::vector<float>>(count, 1.0f);
    return std::shared_ptr<float>(values, values->data());
  }

 private:
  const std::string name_ = "gloo";
  const std::string cpu_ = "cpu";
  Rendezvous& rendezvous_;
  std::chrono::milliseconds timeout_;
};

// Issues one `kind` call over `elements` float32 per rank, as the runtime does.
void issue(const std::string& kind, Communicator& comm, float* in, float* out, size_t elements) {
  const size_t world = static_cast<size_t>(comm.size());
  if (kind == "all_gather") {
    comm.all_gather(in, out, elements * sizeof(float), "probe all-gather");
  } else if (kind == "reduce_scatter") {
    comm.reduce_scatter(in, out, elements, ReduceOp::kAvg, "probe reduce-scatter");
  } else {
    comm.all_reduce(in, elements * world, ReduceOp::kAvg, "probe all-reduce");
  }
}

// This rank's times, one line per (kind, size), in nanoseconds.
std::string encode(const std::vector<std::vector<int64_t>>& times) {
  std::ostringstream text;
  for (const auto& row : times) {
    for (int64_t t : row) text << t << ' ';
    text << '\n';
  }
  return text.str();
}

std::vector<std::vector<int64_t>> decode(const std::string& text) {
  std::vector<std::vector<int64_t>> rows;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream values(line);
    rows.emplace_back();
    for (int64_t t = 0; values >> t;) rows.back().push_back(t);
  }
  return rows;
}

}  // namespace

const std::vector<std::string>& probed_collectives() {
  static const std::vector<std::string> kinds = {"all_gather", "reduce_scatter", "all_reduce"};
  return kinds;
}

std::unique_ptr<ProbeBackend> make_gloo_probe_backend(Rendezvous& rendezvous,
                                                      std::chrono::milliseconds timeout) {
  return std::make_unique<GlooProbeBackend>(rendezvous, timeout);
}

int64_t probe_bytes(int64_t bytes, int world_size) {
  const int64_t per_rank = std::max<int64_t>(1, bytes / world_size / 4);
  return per_rank * world_size * 4;
}

std::vector<CollectiveSeries> probe_collectives(Rendezvous& rendezvous, ProbeBackend& backend,
                                                const CollectiveProbeOptions& options) {
  const int world = rendezvous.world_size();
  std::vector<int64_t> sizes;
  for (int64_t bytes : options.sizes) sizes.push_back(probe_bytes(bytes, world));
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const size_t most = sizes.empty() ? 0 : static_cast<size_t>(sizes.back() / 4);

  // Ranks given other sizes would hang or crash inside Gloo or NCCL; they are refused here.
  std::ostringstream plan;
  plan << options.warmup << ' ' << options.repeats;
  for (int64_t bytes : sizes) plan << ' ' << bytes;
  const std::vector<std::string> plans = rendezvous.exchange("probe/plan", plan.str());
  for (size_t rank = 0; rank < plans.size(); ++rank) {
    if (plans[rank] != plans[0]) {
      fail(ExitCode::kUsage, "rank " + std::to_string(rank) +
                                 " was given other --sizes or --repeats than rank 0; start "
                                 "every rank of mfsdp probe with the same flags");
    }
  }

  // Ones: their sums and averages stay finite and exact, call after call. Made before the
  // lanes, so that a failure closes (on a GPU: aborts) the communicators before they go.
  const std::shared_ptr<float> in = backend.ones(most), out = backend.ones(most);
  // The runtime has a stream and a communicator per role; so has each kind here.
  std::vector<std::unique_ptr<ProbeLane>> lanes = backend.lanes(probed_collectives());
  std::vector<std::vector<int64_t>> times;  // per (kind, size), per timed call
  std::atomic<bool> stop{false};
  std::thread computing;
  if (options.beside) {
    computing = std::thread([&] {
      while (!stop.load()) options.beside();
    });
  }
  struct Joined {
    std::atomic<bool>& stop;
    std::thread& thread;
    ~Joined() {
      stop.store(true);
      if (thread.joinable()) thread.join();
    }
  } joined{stop, computing};
  for (size_t kind = 0; kind < lanes.size(); ++kind) {
    ProbeLane& lane = *lanes[kind];
    for (int64_t bytes : sizes) {
      const size_t elements = static_cast<size_t>(bytes / 4 / world);
      std::vector<int64_t>& row = times.emplace_back();
      for (int call = 0; call < options.warmup + options.repeats; ++call) {
        const int64_t ns = lane.time(
            [&] { issue(probed_collectives()[kind], lane.comm(), in.get(), out.get(), elements); });
        if (call >= options.warmup) row.push_back(ns);
      }
    }
  }
  lanes.clear();
  stop.store(true);
  if (computing.joinable()) computing.join();

  // Every rank's times, then the slowest rank's per call.
  const std::vector<std::string> all = rendezvous.exchange("probe/collective-times", encode(times));
  for (size_t rank = 0; rank < all.size(); ++rank) {
    const auto theirs = decode(all[rank]);
    for (size_t row = 0; row < times.size() && row < theirs.size(); ++row) {
      for (size_t call = 0; call < times[row].size() && call < theirs[row].size(); ++call) {
        times[row][call] = std::max(times[row][call], theirs[row][call]);
      }
    }
  }
  std::vector<CollectiveSeries> series;
  size_t row = 0;
  for (const std::string& kind : probed_collectives()) {
    CollectiveSeries& s = series.emplace_back();
    s.kind = kind;
    for (int64_t bytes : sizes) {
      CollectiveSample& sample = s.samples.emplace_back();
      sample.bytes = bytes;
      for (int64_t ns : times[row]) sample.us.push_back(static_cast<double>(ns) / 1000.0);
      ++row;
    }
  }
  return series;
}

double probe_contention(Rendezvous& rendezvous, ProbeBackend& backend,
                        const std::vector<CollectiveSeries>& series, int64_t bytes,
                        const std::function<double()>& compute) {
  const int world = rendezvous.world_size();
  bytes = probe_bytes(bytes, world);
  // The all-gather's time at the nearest size measured, scaled to `bytes`.
  double gather_us = 0;
  int64_t nearest = 0;
  for (const CollectiveSeries& s : series) {
    if (s.kind != "all_gather") continue;
    for (const CollectiveSample& sample : s.samples) {
      if (nearest == 0 || std::llabs(sample.bytes - bytes) < std::llabs(nearest - bytes)) {
        nearest = sample.bytes;
        gather_us = median(sample.us) * static_cast<double>(bytes) / static_cast<double>(nearest);
      }
    }
  }
  const size_t elements = static_cast<size_t>(bytes / 4 / world);
  const std::shared_ptr<float> in = backend.ones(elements * static_cast<size_t>(world)),
                               out = backend.ones(elements * static_cast<size_t>(world));
  std::vector<std::unique_ptr<ProbeLane>> lanes = backend.lanes({"contention"});
  Communicator& comm = lanes.front()->comm();
  std::vector<double> samples;
  for (int round = 0; round < 3; ++round) {
    rendezvous.exchange("probe/contention/alone/" + std::to_string(round), "");
    const double alone = compute();
    // Every rank issues as many all-gathers: enough for the slowest rank's compute.
    double longest = alone;
    for (const std::string& t : rendezvous.exchange(
             "probe/contention/calls/" + std::to_string(round), std::to_string(alone))) {
      longest = std::max(longest, std::stod(t));
    }
    const int calls =
        std::max(2, static_cast<int>(std::ceil(1.5 * longest * 1e6 / std::max(gather_us, 1.0))));
    const auto start = Clock::now();
    for (int i = 0; i < calls; ++i) {
      comm.all_gather(in.get(), out.get(), elements * sizeof(float), "probe contention");
    }
    const double beside = compute();
    comm.stream().record()->wait();
    const double busy = std::chrono::duration<double>(Clock::now() - start).count();
    const double overlap = std::min(beside, busy);
    const double rest = alone - beside + overlap;  // the compute done while overlapped
    double c = rest > 0 ? overlap / rest - 1 : 4;
    samples.push_back(std::clamp(c, 0.0, 4.0));
  }
  return median(samples);
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  if (values.size() % 2 == 1) return values[mid];
  const double upper = values[mid];
  const double lower = *std::max_element(values.begin(), values.begin() + mid);
  return (lower + upper) / 2;
}

}  // namespace mfsdp::executor
