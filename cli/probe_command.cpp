// `mfsdp probe -o profile.json`: the launcher and, in each rank it starts, the measurements.
#include "cli/probe_command.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/byte_size.h"
#include "cli/command_line.h"
#include "cli/rank_launch.h"
#include "cli/whole_number.h"
#include "executor/comm/collective_probe.h"
#include "executor/runtime/cuda_runtime.h"
#include "executor/train/probe.h"
#include "predict/profile.h"
#include "schema/error.h"
#include "schema/plan_json.h"

namespace mfsdp::cli {
namespace {

struct ProbeFlags {
  LauncherFlags launcher;
  std::string output;
  std::string sizes = "4KiB..16MiB";
  std::string repeats = "15";
  std::string device = "cpu";
  std::string builtin;
  bool quiet = false;
};

const char* kExamples = R"(
Examples:
  # This machine with 2 ranks, as mfsdp run --nproc-per-node 2 would start them:
  mfsdp probe --nproc-per-node 2 -o profile.json

  # Larger messages, more timed calls, 4 threads per rank:
  mfsdp probe --nproc-per-node 2 --sizes 64KiB..256MiB --repeats 30 --threads 4 -o big.json

  # Two nodes (run on each, node-rank 0 and 1, with the same secret on both; docs/launch.md);
  # node 0 writes the profile:
  mfsdp probe --nnodes 2 --node-rank 0 --nproc-per-node 8 --master-addr node0.example \
      --master-port 29500 -o cluster.json
  # Under torchrun or srun each process is the rank it was given:
  torchrun --no-python --nproc-per-node 8 $(which mfsdp-torch) probe -o profile.json

  # NCCL on this node's 8 GPUs, one rank per GPU (LOCAL_RANK picks it, as for mfsdp run):
  mfsdp probe --device cuda --nproc-per-node 8 -o gpus.json

  # No measurement: a built-in profile as a file, to edit (another network, say) and pass
  # to --profile:
  mfsdp probe --builtin h100-nvlink -o h100.json

Sizes are unsharded bytes (all-gather output, reduce-scatter input, all-reduce buffer):
MIN..MAX steps by 4 from MIN and ends at MAX; a list like 4KiB,1MiB,16MiB names each one.
With --device cuda the collectives are NCCL's and the compute is timed on the GPUs; NCCL needs
a GPU per rank, so one GPU cannot be probed: use a built-in profile and --compute-scale there.
Exit codes: 0 ok, 2 bad flags (fewer than two ranks too), 5 the profile cannot be written, 6 a
rank failed (rendezvous, collective) or cannot use a GPU of its own, or a failed rank's code.
)";

constexpr int64_t kMaxSize = int64_t{1} << 30;
constexpr int kWarmup = 3;

// "4KiB..16MiB": 4 KiB, 16 KiB, ... 4 MiB, 16 MiB; "4KiB,1MiB": those. Ascending, distinct.
std::vector<int64_t> parse_sizes(const std::string& text) {
  const std::string how =
      "; write MIN..MAX like 4KiB..16MiB (steps of 4) or a list like 4KiB,1MiB,16MiB";
  const auto size = [&](const std::string& part) {
    int64_t bytes = 0;
    try {
      bytes = parse_bytes(part, "--sizes");
    } catch (const Error&) {
      fail(ExitCode::kUsage, "--sizes '" + text + "': '" + part + "' is not a byte size" + how);
    }
    if (bytes < 1 || bytes > kMaxSize) {
      fail(ExitCode::kUsage,
           "--sizes '" + text + "': " + part + " is out of range; sizes go from 1 B to 1 GiB");
    }
    return bytes;
  };
  std::vector<int64_t> sizes;
  const size_t dots = text.find("..");
  if (dots != std::string::npos) {
    const int64_t low = size(text.substr(0, dots));
    const int64_t high = size(text.substr(dots + 2));
    if (low >= high) {
      fail(ExitCode::kUsage, "--sizes '" + text + "': MIN must be below MAX" + how);
    }
    for (int64_t bytes = low; bytes < high; bytes *= 4) sizes.push_back(bytes);
    sizes.push_back(high);
  } else {
    std::istringstream parts(text);
    for (std::string part; std::getline(parts, part, ',');) sizes.push_back(size(part));
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  }
  if (sizes.size() < 2) {
    fail(ExitCode::kUsage,
         "--sizes '" + text + "' gives one size; a fit needs two or more distinct sizes" + how);
  }
  return sizes;
}

// Each size as the ranks will probe it; two of them must still differ.
void check_sizes_for_world(const std::vector<int64_t>& sizes, const std::string& text,
                           int64_t world) {
  std::vector<int64_t> probed;
  for (int64_t bytes : sizes) probed.push_back(executor::probe_bytes(bytes, world));
  probed.erase(std::unique(probed.begin(), probed.end()), probed.end());
  if (probed.size() < 2) {
    fail(ExitCode::kUsage, "--sizes '" + text + "' gives one size over " + std::to_string(world) +
                               " ranks (each is rounded down to whole float32 elements per "
                               "rank); make the largest at least " +
                               std::to_string(8 * world) + " B");
  }
}

// "4 KiB", "1 MiB", or format_bytes's "1.5 MiB" between units.
std::string size_text(int64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int unit = 0;
  while (unit < 3 && bytes % 1024 == 0 && bytes >= 1024) {
    bytes /= 1024;
    ++unit;
  }
  if (unit == 3 || bytes < 1024) return std::to_string(bytes) + " " + units[unit];
  return format_bytes(bytes << (10 * unit));
}

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

void print_summary(const predict::Profile& profile, const std::string& output, std::ostream& out) {
  out << profile.description << "\n";
  out << "collective        latency   bandwidth   median per size\n";
  for (const predict::CollectiveProfile& c : profile.collectives) {
    std::string name = c.kind;
    name.resize(14, ' ');
    std::string latency = fixed(c.cost.latency_us, 1) + " us";
    latency.insert(0, latency.size() < 10 ? 10 - latency.size() : 0, ' ');
    std::string bandwidth = fixed(c.cost.bytes_per_us / 1000.0, 2) + " GB/s";
    bandwidth.insert(0, bandwidth.size() < 12 ? 12 - bandwidth.size() : 0, ' ');
    out << name << latency << bandwidth << "   ";
    for (size_t i = 0; i < c.points.size(); ++i) {
      out << (i ? ", " : "") << size_text(c.points[i].bytes) << " "
          << fixed(c.points[i].us, c.points[i].us < 100 ? 1 : 0) << " us";
    }
    out << "\n";
  }
  const predict::ComputeProfile& compute = profile.compute;
  out << "compute per rank: matmul "
      << (compute.reference_gflops ? fixed(*compute.reference_gflops, 1) : "?") << " GFLOP/s";
  if (!compute.optimizer_ns_per_element.empty()) {
    out << "; optimizer step";
    bool first = true;
    for (const std::string& name : executor::probed_optimizers()) {
      const auto it = compute.optimizer_ns_per_element.find(name);
      if (it == compute.optimizer_ns_per_element.end()) continue;
      out << (first ? " " : ", ") << name << " " << fixed(it->second, 2);
      first = false;
    }
    out << " ns/element";
  }
  if (compute.contention) {
    out << "; contention " << fixed(*compute.contention, 2)
        << " (compute beside a collective runs at " << fixed(100 / (1 + *compute.contention), 0)
        << " % speed)";
  }
  out << "\nwrote " << output << "\n";
}

// The profile rank 0 wrote, read back by our launcher for its summary.
predict::Profile read_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ExitCode::kIo, path + ": cannot read the profile rank 0 wrote");
  try {
    return predict::parse_profile(nlohmann::json::parse(in));
  } catch (const nlohmann::json::exception& e) {
    fail(ExitCode::kInternal, path + ": the profile rank 0 wrote is not JSON: " + e.what());
  }
}

// Fewer than two ranks: nothing to time. `more` says how to start more; with --device cuda
// each also needs a GPU of its own.
[[noreturn]] void refuse_one_rank(const std::string& device, const std::string& more) {
  if (device != "cuda") {
    fail(ExitCode::kUsage, "mfsdp probe needs two or more ranks to time collectives; " + more);
  }
  fail(ExitCode::kUsage,
       "mfsdp probe needs two or more ranks to time collectives, and with --device cuda a GPU "
       "for each (NCCL cannot put two ranks on one GPU): " +
           more +
           ", one per GPU; with one GPU, predict with a built-in profile and --compute-scale "
           "instead (docs/predict.md)");
}

// --device cuda: whether each of this node's ranks can use a GPU of its own, asked before any
// rank starts, with the reason and exit code every rank would give (as mfsdp run asks).
void check_gpus_here(const LauncherFlags& flags, int64_t world) {
  const auto usable = [&](int local_ranks, int local) {
    executor::LaunchEnv env;
    env.world_size = static_cast<int>(world);
    env.local_world_size = local_ranks;
    env.local_rank = local;
    env.rank = flags.node_rank * flags.nproc_per_node + local;
    return executor::gpu_availability(env);
  };
  for (int local = 0; local < flags.nproc_per_node; ++local) {
    const executor::GpuAvailability gpu = usable(flags.nproc_per_node, local);
    if (gpu.available) continue;
    // One GPU here, and more ranks: the plain answer is that it cannot be probed here.
    if (usable(1, 0).available && !usable(2, 1).available) {
      fail(ExitCode::kRuntime,
           "mfsdp probe --device cuda: this node has one GPU, and NCCL needs one per rank, so " +
               std::to_string(flags.nproc_per_node) +
               " ranks cannot time collectives here; probe a node with 2 or more GPUs (or "
               "--nproc-per-node 1 on each of 2 or more nodes), or predict with a built-in "
               "profile and --compute-scale (docs/predict.md)");
    }
    fail(ExitCode::kRuntime, "rank " +
                                 std::to_string(flags.node_rank * flags.nproc_per_node + local) +
                                 " cannot probe on a GPU: " + gpu.why_not + "; " + gpu.fix +
                                 ", or probe with --device cpu");
  }
}

// One rank: measure, and on rank 0 write the profile.
void probe_as_rank(const ProbeFlags& flags, const std::vector<int64_t>& sizes, int repeats) {
  const executor::LaunchEnv env = executor::LaunchEnv::from_environment();
  if (env.world_size < 2) {
    refuse_one_rank(flags.device,
                    flags.device == "cuda" ? "start two or more ranks" : "this world has one");
  }
  check_sizes_for_world(sizes, flags.sizes, env.world_size);
  // Rank 0 finds out now, not after the measurements, that it cannot write the profile.
  if (env.rank == 0) check_output_directory("-o", flags.output);
  executor::ProbeConfig config;
  config.sizes = sizes;
  config.warmup = kWarmup;
  config.repeats = repeats;
  config.threads = flags.launcher.threads > 0 ? flags.launcher.threads : env_threads();
  config.device = flags.device;
  const std::optional<predict::Profile> profile = executor::probe(config, env);
  if (!profile) return;
  schema::write_file_atomically(flags.output, predict::profile_text(*profile));
  // Our own launcher prints the summary itself, without the "[rank 0] " prefix of its ranks.
  const char* ours = std::getenv("MFSDP_RUN_WORKER");
  if (!flags.quiet && !(ours && std::string(ours) == "1")) {
    print_summary(*profile, flags.output, std::cout);
  }
}

// --builtin: the built-in profile written as a file; nothing is launched or measured.
void write_builtin(const ProbeFlags& flags, const CLI::App& cmd) {
  for (const char* flag : {"--sizes", "--repeats", "--device", "--nproc-per-node", "--nnodes"}) {
    if (cmd.count(flag) > 0) {
      fail(ExitCode::kUsage, std::string(flag) +
                                 " is for measuring, and --builtin writes a "
                                 "built-in profile without measuring; drop one");
    }
  }
  const std::optional<predict::Profile> profile = predict::builtin_profile(flags.builtin);
  if (!profile) {
    fail(ExitCode::kUsage, "--builtin '" + flags.builtin + "': not a built-in profile; they are " +
                               predict::builtin_profile_list());
  }
  check_output_directory("-o", flags.output);
  schema::write_file_atomically(flags.output, predict::profile_text(*profile));
  if (!flags.quiet) print_summary(*profile, flags.output, std::cout);
}

void probe(ProbeFlags& flags, const CLI::App& cmd, int argc, char** argv) {
  if (!flags.builtin.empty()) {
    write_builtin(flags, cmd);
    return;
  }
  LauncherFlags& launcher = flags.launcher;
  read_launcher_flags(launcher, cmd);
  const int repeats =
      static_cast<int>(whole_number(flags.repeats, "--repeats", 1, 100000, "from 1 to 100000"));
  const std::vector<int64_t> sizes = parse_sizes(flags.sizes);
  if (join_as_rank(launcher)) {
    probe_as_rank(flags, sizes, repeats);
    return;
  }

  // The launcher: check what can be checked here, so a bad flag fails once, not per rank.
  check_launch_flags(launcher, cmd);
  if (launcher.nproc_per_node == 0) launcher.nproc_per_node = 2;
  const int64_t world = static_cast<int64_t>(launcher.nnodes) * launcher.nproc_per_node;
  if (world < 2) refuse_one_rank(flags.device, "pass --nproc-per-node 2 or more");
  check_sizes_for_world(sizes, flags.sizes, world);
  if (launcher.node_rank == 0) check_output_directory("-o", flags.output);
  if (flags.device == "cuda") check_gpus_here(launcher, world);
  const launch::LaunchOptions options = rank_launch_options(launcher, argc, argv, "probe");
  std::cout.flush();
  std::cerr.flush();
  const int status = launch::launch(options);
  if (status != 0) exit_with(static_cast<ExitCode>(status));
  if (launcher.node_rank == 0 && !flags.quiet) {
    print_summary(read_profile(flags.output), flags.output, std::cout);
  }
}

}  // namespace

void add_probe_command(CLI::App& app, int argc, char** argv) {
  auto flags = std::make_shared<ProbeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "probe", "Measure this machine's collectives and compute into a profile for predictions");
  cmd->footer(kExamples);
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("-o,--output", flags->output, "Profile file to write (docs/predict.md)")
      ->required();
  cmd->add_option("--sizes", flags->sizes,
                  "Unsharded message sizes: MIN..MAX in steps of 4, or a list A,B,... "
                  "(default 4KiB..16MiB)");
  cmd->add_option("--repeats", flags->repeats,
                  "Timed calls per collective and size, after 3 warm-up calls (default 15)")
      ->type_name("INT");
  cmd->add_option("--device", flags->device,
                  "cpu (default): Gloo on the CPU; cuda: NCCL, one GPU per rank (LOCAL_RANK picks "
                  "it), compute timed on the GPU")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--builtin", flags->builtin,
                  "Measure nothing: write the built-in profile NAME (" +
                      predict::builtin_profile_list() +
                      ") to -o, to edit and pass to --profile (docs/predict.md#built-in-profiles)")
      ->type_name("NAME");
  cmd->add_flag("-q,--quiet", flags->quiet, "Print nothing on success");
  add_launcher_flags(*cmd, flags->launcher, "2");
  cmd->callback([flags, cmd, argc, argv] { probe(*flags, *cmd, argc, argv); });
}

}  // namespace mfsdp::cli
