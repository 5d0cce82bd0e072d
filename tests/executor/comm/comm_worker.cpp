// One rank of the multi-process communicator tests (collectives_test.cpp starts N of them
// with torchrun's environment). Runs a scenario against the other ranks and checks every
// result against values it computes itself. Prints "rank R ok: SCENARIO" and exits 0; exits
// 1 on a wrong result, or prints the mfsdp::Error and exits with its code (6: runtime).
//
//   mfsdp_comm_worker collectives|overlap|die|stall|subgroups [--timeout-ms N]

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "executor/comm/rendezvous.h"
#include "executor/runtime/cpu_stream.h"
#include "schema/error.h"

namespace {

using mfsdp::executor::Communicator;
using mfsdp::executor::FloatPiece;
using mfsdp::executor::GlooCommunicator;
using mfsdp::executor::ReduceOp;
using mfsdp::executor::Rendezvous;
using mfsdp::executor::Stream;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::seconds kRendezvousTimeout(20);

// Small integers, different on every rank and position: sums over ranks are exact in float,
// so results must match bit for bit whatever order the ring adds them in.
float value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 11) * (rank + 2));
}

std::vector<float> rank_data(int rank, size_t count, size_t offset = 0) {
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = value(rank, offset + i);
  return data;
}

// Sum over `ranks` of value(rank, offset + i), optionally averaged.
std::vector<float> expected_sum(const std::vector<int>& ranks, size_t count, size_t offset,
                                ReduceOp op) {
  std::vector<float> sum(count, 0.0f);
  for (int r : ranks) {
    for (size_t i = 0; i < count; ++i) sum[i] += value(r, offset + i);
  }
  if (op == ReduceOp::kAvg) {
    for (float& x : sum) x /= static_cast<float>(ranks.size());
  }
  return sum;
}

std::vector<int> iota(int n) {
  std::vector<int> ranks(n);
  for (int r = 0; r < n; ++r) ranks[r] = r;
  return ranks;
}

class Checker {
 public:
  explicit Checker(int rank) : rank_(rank) {}

  void expect(const std::vector<float>& got, const std::vector<float>& want,
              const std::string& what) {
    if (got.size() != want.size()) {
      report(what + ": " + std::to_string(got.size()) + " values, want " +
             std::to_string(want.size()));
      return;
    }
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        report(what + ": [" + std::to_string(i) + "] = " + std::to_string(got[i]) + ", want " +
               std::to_string(want[i]));
        return;
      }
    }
  }
  void expect(bool ok, const std::string& what) {
    if (!ok) report(what);
  }
  int failures() const { return failures_; }

 private:
  void report(const std::string& message) {
    ++failures_;
    std::cerr << "rank " << rank_ << ": wrong result: " << message << "\n";
  }
  int rank_;
  int failures_ = 0;
};

// Every collective at counts 0, 1, 7 and 1000, in and out of place, all issued before one
// synchronize (the stream runs them in order while the buffers stay alive).
int collectives(Rendezvous& rendezvous, std::chrono::milliseconds timeout) {
  const int world = rendezvous.world_size();
  const int rank = rendezvous.rank();
  Checker check(rank);
  const std::vector<std::string> names =
      rendezvous.exchange("names", "rank" + std::to_string(rank));
  for (int r = 0; r < world; ++r) check.expect(names[r] == "rank" + std::to_string(r), "exchange");

  auto stream = mfsdp::executor::make_cpu_stream("collectives");
  std::unique_ptr<GlooCommunicator> comm =
      rendezvous.gloo_communicator("world", iota(world), *stream, timeout);
  check.expect(comm->rank() == rank && comm->size() == world, "group rank and size");

  struct Round {
    size_t count;
    std::vector<float> gather_in, gathered, gathered_in_place;
    std::vector<float> scatter_in, summed, averaged, scatter_in_place;
    std::vector<float> all_summed, all_averaged;
  };
  std::vector<std::unique_ptr<Round>> rounds;
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
    auto round = std::make_unique<Round>();
    Round& b = *round;
    b.count = count;
    const std::string at = " of " + std::to_string(count);
    b.gather_in = rank_data(rank, count);
    b.gathered.assign(world * count, -1.0f);
    comm->all_gather(b.gather_in.data(), b.gathered.data(), count * sizeof(float),
                     "all-gather" + at);
    b.gathered_in_place.assign(world * count, -1.0f);
    std::copy(b.gather_in.begin(), b.gather_in.end(), b.gathered_in_place.begin() + rank * count);
    comm->all_gather(b.gathered_in_place.data() + rank * count, b.gathered_in_place.data(),
                     count * sizeof(float), "in-place all-gather" + at);

    b.scatter_in = rank_data(rank, world * count);
    b.summed.assign(count, -1.0f);
    b.averaged.assign(count, -1.0f);
    comm->reduce_scatter(b.scatter_in.data(), b.summed.data(), count, ReduceOp::kSum,
                         "reduce-scatter (sum)" + at);
    comm->reduce_scatter(b.scatter_in.data(), b.averaged.data(), count, ReduceOp::kAvg,
                         "reduce-scatter (avg)" + at);
    b.scatter_in_place = b.scatter_in;
    float* own_chunk = b.scatter_in_place.data() + rank * count;
    comm->reduce_scatter(b.scatter_in_place.data(), own_chunk, count, ReduceOp::kSum,
                         "in-place reduce-scatter" + at);

    b.all_summed = rank_data(rank, count);
    b.all_averaged = rank_data(rank, count);
    comm->all_reduce(b.all_summed.data(), count, ReduceOp::kSum, "all-reduce (sum)" + at);
    comm->all_reduce(b.all_averaged.data(), count, ReduceOp::kAvg, "all-reduce (avg)" + at);

    rounds.push_back(std::move(round));
  }

  // Reduce-scatters over an input in pieces, as gradients arrive: three pieces with a gap of
  // zeros between the first two, summed into a fresh output or averaged into one holding 1s.
  // The largest count spans several of the ring's slices.
  struct PieceRound {
    size_t count, gap_begin, gap_end;
    std::vector<std::vector<float>> pieces;
    std::vector<float> summed, accumulated;
  };
  std::vector<std::unique_ptr<PieceRound>> piece_rounds;
  for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, (size_t{1} << 20) + 3}) {
    auto round = std::make_unique<PieceRound>();
    PieceRound& b = *round;
    b.count = count;
    const size_t total = world * count;
    const size_t cut = total / 3;
    b.gap_begin = std::min(total, cut + 1);
    b.gap_end = std::min(total, cut + 4);
    const size_t bounds[][2] = {
        {0, b.gap_begin}, {b.gap_end, (b.gap_end + total) / 2}, {(b.gap_end + total) / 2, total}};
    std::vector<FloatPiece> in;
    for (const auto& bound : bounds) {
      if (bound[0] >= bound[1]) continue;
      b.pieces.push_back(rank_data(rank, bound[1] - bound[0], bound[0]));
      in.push_back({bound[0], bound[1] - bound[0], b.pieces.back().data()});
    }
    b.summed.assign(count, -1.0f);
    b.accumulated.assign(count, 1.0f);
    const std::string at = " of " + std::to_string(count);
    comm->reduce_scatter(in, b.summed.data(), count, ReduceOp::kSum, false,
                         "reduce-scatter of pieces (sum)" + at);
    comm->reduce_scatter(in, b.accumulated.data(), count, ReduceOp::kAvg, true,
                         "reduce-scatter of pieces (avg, accumulated)" + at);
    piece_rounds.push_back(std::move(round));
  }
  stream->synchronize();

  for (const auto& round : piece_rounds) {
    const PieceRound& b = *round;
    const size_t count = b.count, offset = rank * count;
    const std::string at = " of " + std::to_string(count);
    std::vector<float> sum = expected_sum(iota(world), count, offset, ReduceOp::kSum);
    for (size_t i = 0; i < count; ++i) {
      if (offset + i >= b.gap_begin && offset + i < b.gap_end) sum[i] = 0.0f;
    }
    std::vector<float> accumulated(count);
    for (size_t i = 0; i < count; ++i) accumulated[i] = 1.0f + sum[i] / static_cast<float>(world);
    check.expect(b.summed, sum, "reduce-scatter of pieces (sum)" + at);
    check.expect(b.accumulated, accumulated, "reduce-scatter of pieces (avg, accumulated)" + at);
  }

  for (const auto& round : rounds) {
    const Round& b = *round;
    const size_t count = b.count;
    const std::string at = " of " + std::to_string(count);
    std::vector<float> want_gathered;
    for (int r = 0; r < world; ++r) {
      std::vector<float> part = rank_data(r, count);
      want_gathered.insert(want_gathered.end(), part.begin(), part.end());
    }
    check.expect(b.gathered, want_gathered, "all-gather" + at);
    check.expect(b.gathered_in_place, want_gathered, "in-place all-gather" + at);
    const size_t offset = rank * count;
    check.expect(b.summed, expected_sum(iota(world), count, offset, ReduceOp::kSum),
                 "reduce-scatter (sum)" + at);
    check.expect(b.averaged, expected_sum(iota(world), count, offset, ReduceOp::kAvg),
                 "reduce-scatter (avg)" + at);
    check.expect(std::vector<float>(b.scatter_in_place.begin() + offset,
                                    b.scatter_in_place.begin() + offset + count),
                 expected_sum(iota(world), count, offset, ReduceOp::kSum),
                 "in-place reduce-scatter" + at);
    check.expect(b.all_summed, expected_sum(iota(world), count, 0, ReduceOp::kSum),
                 "all-reduce (sum)" + at);
    check.expect(b.all_averaged, expected_sum(iota(world), count, 0, ReduceOp::kAvg),
                 "all-reduce (avg)" + at);
  }
  return check.failures();
}

// An all-gather and a reduce-scatter on two communicators and two streams, in flight at
// once: rank 0 holds its all-gather back until its reduce-scatter is done, so the others'
// all-gathers (issued first) can only finish if their reduce-scatters run meanwhile. One
// shared stream or context would deadlock until the timeout.
int overlap(Rendezvous& rendezvous, std::chrono::milliseconds timeout) {
  const int world = rendezvous.world_size();
  const int rank = rendezvous.rank();
  Checker check(rank);
  auto gather_stream = mfsdp::executor::make_cpu_stream("all-gather");
  auto scatter_stream = mfsdp::executor::make_cpu_stream("reduce-scatter");
  auto gatherer = rendezvous.gloo_communicator("params", iota(world), *gather_stream, timeout);
  auto scatterer = rendezvous.gloo_communicator("grads", iota(world), *scatter_stream, timeout);

  const size_t count = size_t{1} << 16;
  std::vector<float> params = rank_data(rank, count);
  std::vector<float> gathered(world * count, -1.0f);
  std::vector<float> grads = rank_data(rank, world * count);
  std::vector<float> grad_shard(count, -1.0f);
  auto gather = [&] {
    gatherer->all_gather(params.data(), gathered.data(), count * sizeof(float),
                         "all-gather of params");
  };
  auto scatter = [&] {
    scatterer->reduce_scatter(grads.data(), grad_shard.data(), count, ReduceOp::kSum,
                              "reduce-scatter of grads");
  };
  if (rank == 0) {
    scatter();
    gather_stream->wait_for(scatter_stream->record());
    gather();
  } else {
    gather();
    scatter();
  }
  // Cross-stream order: the reduce-scatter stream sums what the all-gather stream gathered.
  scatter_stream->wait_for(gather_stream->record());
  scatterer->all_reduce(gathered.data(), gathered.size(), ReduceOp::kSum,
                        "all-reduce of gathered params");
  gather_stream->synchronize();
  scatter_stream->synchronize();

  check.expect(grad_shard, expected_sum(iota(world), count, rank * count, ReduceOp::kSum),
               "reduce-scatter of grads");
  std::vector<float> want;
  for (int r = 0; r < world; ++r) {
    for (float x : rank_data(r, count)) want.push_back(x * static_cast<float>(world));
  }
  check.expect(gathered, want, "all-reduce of gathered params");
  return check.failures();
}

// The last rank exits at the reduce-scatter that the others are running, after a warm-up
// collective has connected everyone; they must fail, naming the collective, within the
// timeout. (It leaves when its stream reaches the reduce-scatter: leaving later, from
// another thread, could race with a ring that has already finished.)
int die(Rendezvous& rendezvous, std::chrono::milliseconds timeout) {
  const int world = rendezvous.world_size();
  const int rank = rendezvous.rank();
  auto stream = mfsdp::executor::make_cpu_stream("reduce-scatter");
  auto comm = rendezvous.gloo_communicator("grads", iota(world), *stream, timeout);
  std::vector<float> warm_up = rank_data(rank, 16);
  comm->all_reduce(warm_up.data(), warm_up.size(), ReduceOp::kSum, "warm-up all-reduce");
  stream->synchronize();

  const size_t count = size_t{1} << 16;
  std::vector<float> grads = rank_data(rank, world * count);
  std::vector<float> shard(count);
  if (rank == world - 1) {
    stream->enqueue(
        [] {
          std::fflush(nullptr);
          _exit(42);  // no goodbye: sockets close as the kernel reaps the process
        },
        "exit");
  }
  comm->reduce_scatter(grads.data(), shard.data(), count, ReduceOp::kSum,
                       "reduce-scatter of grads");
  const auto start = Clock::now();
  try {
    stream->synchronize();
  } catch (const mfsdp::Error&) {
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    std::cout << "rank " << rank << " failed after " << took.count() << " ms" << std::endl;
    throw;
  }
  std::cerr << "rank " << rank << ": the reduce-scatter succeeded without the last rank\n";
  return 1;
}

// The last rank stays alive but never joins the reduce-scatter: the others must time out.
// It issues an all-reduce instead, with a longer timeout, which fails once they have given
// up and exited.
int stall(Rendezvous& rendezvous, std::chrono::milliseconds timeout) {
  const int world = rendezvous.world_size();
  const int rank = rendezvous.rank();
  const bool stalls = rank == world - 1;
  auto stream = mfsdp::executor::make_cpu_stream("reduce-scatter");
  auto comm =
      rendezvous.gloo_communicator("grads", iota(world), *stream, stalls ? 5 * timeout : timeout);
  std::vector<float> grads = rank_data(rank, world * 64);
  std::vector<float> shard(64);
  const auto start = Clock::now();
  if (stalls) {
    comm->all_reduce(grads.data(), grads.size(), ReduceOp::kSum, "all-reduce of stalled rank");
  } else {
    comm->reduce_scatter(grads.data(), shard.data(), 64, ReduceOp::kSum, "reduce-scatter of grads");
  }
  try {
    stream->synchronize();
  } catch (const mfsdp::Error&) {
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    std::cout << "rank " << rank << " failed after " << took.count() << " ms" << std::endl;
    throw;
  }
  std::cerr << "rank " << rank << ": a collective succeeded with a rank missing\n";
  return 1;
}

// Ranks {0,2} and {1,3} reduce within their pair while the world gathers.
int subgroups(Rendezvous& rendezvous, std::chrono::milliseconds timeout) {
  const int rank = rendezvous.rank();
  Checker check(rank);
  if (rendezvous.world_size() != 4) {
    std::cerr << "subgroups needs 4 ranks\n";
    return 1;
  }
  const std::vector<int> pair = rank % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
  const std::string pair_name = rank % 2 == 0 ? "even" : "odd";
  auto pair_stream = mfsdp::executor::make_cpu_stream("pair");
  auto world_stream = mfsdp::executor::make_cpu_stream("world");
  auto in_pair = rendezvous.gloo_communicator(pair_name, pair, *pair_stream, timeout);
  auto in_world = rendezvous.gloo_communicator("world", iota(4), *world_stream, timeout);
  check.expect(in_pair->size() == 2 && in_pair->rank() == rank / 2, "pair rank and size");

  const size_t count = 300;
  std::vector<float> summed = rank_data(rank, count);
  in_pair->all_reduce(summed.data(), count, ReduceOp::kSum, "pair all-reduce");
  std::vector<float> grads = rank_data(rank, 2 * count);
  std::vector<float> shard(count, -1.0f);
  in_pair->reduce_scatter(grads.data(), shard.data(), count, ReduceOp::kAvg, "pair reduce-scatter");
  std::vector<float> mine = rank_data(rank, count);
  std::vector<float> gathered(4 * count, -1.0f);
  in_world->all_gather(mine.data(), gathered.data(), count * sizeof(float), "world all-gather");
  pair_stream->synchronize();
  world_stream->synchronize();

  check.expect(summed, expected_sum(pair, count, 0, ReduceOp::kSum), "pair all-reduce");
  check.expect(shard, expected_sum(pair, count, (rank / 2) * count, ReduceOp::kAvg),
               "pair reduce-scatter");
  std::vector<float> want;
  for (int r = 0; r < 4; ++r) {
    for (float x : rank_data(r, count)) want.push_back(x);
  }
  check.expect(gathered, want, "world all-gather");
  return check.failures();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr
        << "usage: mfsdp_comm_worker collectives|overlap|die|stall|subgroups [--timeout-ms N]\n";
    return 2;
  }
  const std::string scenario = argv[1];
  std::chrono::milliseconds timeout(10000);
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--timeout-ms") == 0)
      timeout = std::chrono::milliseconds(std::stoi(argv[i + 1]));
  }
  try {
    const auto env = mfsdp::executor::LaunchEnv::from_environment();
    Rendezvous rendezvous(env, kRendezvousTimeout);
    int failures = 0;
    if (scenario == "collectives") {
      failures = collectives(rendezvous, timeout);
    } else if (scenario == "overlap") {
      failures = overlap(rendezvous, timeout);
    } else if (scenario == "die") {
      failures = die(rendezvous, timeout);
    } else if (scenario == "stall") {
      failures = stall(rendezvous, timeout);
    } else if (scenario == "subgroups") {
      failures = subgroups(rendezvous, timeout);
    } else {
      std::cerr << "unknown scenario '" << scenario << "'\n";
      return 2;
    }
    if (failures > 0) return 1;
    std::cout << "rank " << env.rank << " ok: " << scenario << std::endl;
    return 0;
  } catch (const mfsdp::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return e.exit_status();
  }
}
