// `mfsdp run plan.json ...`: the launcher and, in each worker it starts, the training loop.
#include "cli/run_command.h"

#include <limits.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/command_line.h"
#include "cli/whole_number.h"
#include "executor/launch/external_launch.h"
#include "executor/launch/launcher.h"
#include "executor/runtime/cuda_runtime.h"
#include "executor/train/plan_training.h"
#include "executor/train/trainer.h"
#include "schema/error.h"
#include "schema/model_path.h"
#include "schema/plan_json.h"
#include "schema/plan_loader.h"

namespace mfsdp::cli {
namespace {

struct RunFlags {
  std::string plan;
  executor::TrainConfig train;
  // Whole-number flags as typed, by name; read_whole_numbers checks them against kWholeFlags
  // and stores them here and in `train` (CLI11 would clamp a value beyond 64 bits).
  std::map<std::string, std::string> whole;
  std::string data = "synthetic";
  std::string data_kind;
  std::string input_shape;
  std::string input_dtype;  // empty: int64, or the plan's traced input's
  std::string betas;
  double clip_grad_norm = 0;
  double collective_timeout_s = 1800;
  // Launcher.
  int nproc_per_node = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = -1;
  std::string rdzv_bind;  // empty: rank 0 listens on --master-addr
  std::string log_dir;
  double grace_s = 10;
  int threads = 0;  // 0: OMP_NUM_THREADS if set, else the cores shared out among the workers
};

const char* kExamples = R"(
Examples:
  # Plan the bundled byte-level GPT for 2 ranks, then train it on the bundled text:
  mfsdp plan examples/bytegpt.pt --world-size 2 --unit 'layers.*' --unit '<root>' -o gpt.plan.json
  mfsdp run gpt.plan.json --nproc-per-node 2 --data examples/tiny_corpus.txt --seq-len 64 \
      --global-batch 16 --steps 200 --lr 3e-3 --warmup 20 --lr-schedule cosine

  # Synthetic data (no files), 4 microbatches per step, checkpoints every 50 steps:
  mfsdp run gpt.plan.json --nproc-per-node 2 --input-shape 64 --global-batch 32 \
      --microbatches 4 --steps 200 --checkpoint-dir ckpt --checkpoint-every 50
  # ... and after a crash, the same command with --resume continues bit-exactly.

  # Continue it on 4 ranks: a 4-rank plan of the same model; the checkpoint is resharded:
  mfsdp plan gpt.pt --world-size 4 --unit 'layers.*' --unit '<root>' -o gpt4.plan.json
  mfsdp run gpt4.plan.json --nproc-per-node 4 --input-shape 64 --global-batch 32 \
      --microbatches 4 --steps 200 --resume ckpt --checkpoint-dir ckpt4

  # Metrics per step and rank, and a timeline of steps 2-4 for Perfetto:
  mfsdp run gpt.plan.json --nproc-per-node 2 --input-shape 64 --steps 20 --metrics m.jsonl \
      --trace trace.json

  # Two nodes (run on each, node-rank 0 and 1, with the same secret on both; docs/launch.md):
  export MFSDP_RDZV_SECRET_FILE=~/.mfsdp/run.secret
  mfsdp run gpt.plan.json --nnodes 2 --node-rank 0 --nproc-per-node 8 \
      --master-addr node0.example --master-port 29500 ...
  # One rank per GPU (--device auto picks the GPUs when every rank has one):
  mfsdp run gpt.plan.json --nproc-per-node 8 --device cuda ...
  # Under torchrun or srun each process runs as the rank it was given (torchrun starts a
  # program that is not Python only with --no-python):
  torchrun --no-python --nproc-per-node 8 $(which mfsdp-torch) run gpt.plan.json ...

Defaults: a plan made with mfsdp plan --training FILE carries training values (steps, lr, ...);
flags given here win over them.
Data: synthetic, a text file (.txt, bytes), nanoGPT tokens (.bin, uint16) or torch.save'd
tensors (.pt); the global batch is the same for any number of ranks (docs/data.md).
Exit codes: 0 ok, 2 bad flags or inputs, 3 model cannot be loaded, 5 cannot write,
6 a rank failed at run time (collective, rendezvous, checkpoint), or a failed worker's code.
)";

struct WholeRange {
  int64_t min;
  int64_t max;
  std::string words;  // for errors: "it must be <words>"
};

const std::string kInt64Max = std::to_string(INT64_MAX);
const std::string kInt32Max = std::to_string(INT32_MAX);

// Every whole-number flag and the values it takes (docs/run.md#whole-number-flags). Counts of
// steps and samples may be any positive int64; ranks, ports and threads have the bounds of
// Gloo, NCCL, TCP and the OS; sequence lengths and traced steps are bounded so that adding one
// window or one step to them cannot overflow.
const std::map<std::string, WholeRange> kWholeFlags = {
    {"--nproc-per-node",
     {1, INT32_MAX, "from 1 to " + kInt32Max + " (or left out: the plan's world size / --nnodes)"}},
    {"--nnodes", {1, INT32_MAX, "from 1 to " + kInt32Max}},
    {"--node-rank", {0, INT32_MAX - 1, "from 0 to --nnodes - 1"}},
    {"--master-port", {0, 65535, "from 1 to 65535, or 0 to pick a free port"}},
    {"--threads", {1, 65536, "from 1 to 65536"}},
    {"--seq-len", {1, INT32_MAX, "from 1 to " + kInt32Max}},
    {"--vocab-size", {1, INT64_MAX, "from 1 to " + kInt64Max}},
    {"--seed", {0, INT64_MAX, "from 0 to " + kInt64Max}},
    {"--steps", {1, INT64_MAX, "from 1 to " + kInt64Max}},
    {"--global-batch", {1, INT64_MAX, "from 1 to " + kInt64Max}},
    {"--microbatches", {1, INT64_MAX, "from 1 to " + kInt64Max}},
    {"--warmup", {0, INT64_MAX, "from 0 to " + kInt64Max}},
    {"--checkpoint-every", {0, INT64_MAX, "0 (only at the end) or more, up to " + kInt64Max}},
    {"--keep-checkpoints", {0, INT32_MAX, "0 (keep all) or more, up to " + kInt32Max}},
    {"--trace-steps", {1, INT32_MAX, "from 1 to " + kInt32Max}},
    {"--log-every", {1, INT64_MAX, "from 1 to " + kInt64Max}},
};

// Checks each whole-number flag given and stores its value, in launcher and workers alike.
void read_whole_numbers(RunFlags& flags, const CLI::App& cmd) {
  const auto read = [&](const std::string& flag, auto& field) {
    if (cmd.count(flag) == 0) return;
    const WholeRange& range = kWholeFlags.at(flag);
    const int64_t value =
        whole_number(flags.whole.at(flag), flag, range.min, range.max, range.words);
    field = static_cast<std::remove_reference_t<decltype(field)>>(value);
  };
  executor::TrainConfig& t = flags.train;
  read("--nproc-per-node", flags.nproc_per_node);
  read("--nnodes", flags.nnodes);
  read("--node-rank", flags.node_rank);
  read("--master-port", flags.master_port);
  read("--threads", flags.threads);
  read("--seq-len", t.data.seq_len);
  read("--vocab-size", t.vocab_size);
  read("--seed", t.data.seed);
  read("--steps", t.steps);
  read("--global-batch", t.data.global_batch);
  read("--microbatches", t.data.microbatches);
  read("--warmup", t.warmup_steps);
  read("--checkpoint-every", t.checkpoint_every);
  read("--keep-checkpoints", t.keep_checkpoints);
  read("--trace-steps", t.trace_steps);
  read("--log-every", t.log_every);
}

// "64", "3x32x32" or "3,32,32".
std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> shape;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find_first_of("x,", begin), text.size());
    const std::string part = text.substr(begin, end - begin);
    char* stop = nullptr;
    errno = 0;
    const long long v = std::strtoll(part.c_str(), &stop, 10);
    if (part.empty() || *stop != '\0' || v <= 0 || errno == ERANGE) {
      fail(ExitCode::kUsage, "--input-shape '" + text +
                                 "' is not a shape; write one sample's sizes like 64, 3x32x32 "
                                 "or 3,32,32");
    }
    shape.push_back(v);
    begin = end + 1;
  }
  return shape;
}

void parse_betas(const std::string& text, executor::OptimizerConfig& optimizer) {
  double b1 = 0, b2 = 0;
  char comma = 0;
  std::istringstream in(text);
  if (!(in >> b1 >> comma >> b2) || comma != ',' || !(in >> std::ws).eof() || b1 < 0 || b1 >= 1 ||
      b2 < 0 || b2 >= 1) {
    fail(ExitCode::kUsage, "--betas '" + text + "' must be two numbers in [0, 1), like 0.9,0.95");
  }
  optimizer.beta1 = b1;
  optimizer.beta2 = b2;
}

std::string self_executable() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) fail(ExitCode::kInternal, "cannot find this program's path in /proc/self/exe");
  path[n] = '\0';
  return path;
}

// The launcher reads what it needs (mesh, training defaults, traced inputs); each worker's
// context checks every rule before it executes the plan.
schema::Plan load_plan(const std::string& path) {
  return schema::load_plan_file(path, schema::PlanCheck::kShape);
}

// Synthetic inputs shaped like the plan's first --trace-input (its batch dimension dropped),
// when the flags give no shape: "2x64:int64" gives samples of 64 token ids.
void use_traced_input(const schema::Plan& plan, const std::string& dtype_flag,
                      executor::DataConfig& data) {
  if (!plan.trace || plan.trace->inputs.empty()) return;
  const std::string& spec = plan.trace->inputs.front();
  const size_t colon = spec.find(':');
  const std::string dtype = colon == std::string::npos ? "float32" : spec.substr(colon + 1);
  std::vector<int64_t> shape;
  try {
    shape = parse_shape(spec.substr(0, colon));
  } catch (const Error&) {
    shape.clear();
  }
  const bool integral = dtype == "int64" || dtype == "int32" || dtype == "int16" ||
                        dtype == "int8" || dtype == "uint8";
  if (shape.size() < 2 || !(integral || dtype == "float32")) {
    fail(ExitCode::kUsage, "the plan's traced input " + spec +
                               " cannot shape synthetic data (it needs a batch dimension and "
                               "int64 or float32); pass --input-shape and --input-dtype");
  }
  data.sample_shape.assign(shape.begin() + 1, shape.end());
  if (dtype_flag.empty()) data.input_dtype = integral ? "int64" : "float32";
}

// The finished training config: flags resolved against the plan.
// OMP_NUM_THREADS as a worker found it (set by our launcher, or by the user for another
// launcher), 0 when unset or not a positive whole number (LibTorch then chooses).
int env_threads() {
  const char* value = std::getenv("OMP_NUM_THREADS");
  if (value == nullptr) return 0;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || errno != 0 || n < 1 || n > 65536) return 0;
  return static_cast<int>(n);
}

executor::TrainConfig resolve(const RunFlags& flags, const CLI::App& cmd,
                              const schema::Plan& plan) {
  executor::TrainConfig config = flags.train;
  config.plan_path = flags.plan;
  config.resume = cmd.count("--resume") > 0;
  std::error_code error;
  if (!config.resume_from.empty() && std::filesystem::is_regular_file(config.resume_from, error)) {
    fail(ExitCode::kUsage, "--resume " + config.resume_from +
                               ": a checkpoint is a directory, and this is a file; put the plan "
                               "first: mfsdp run PLAN ... --resume [CKPT]");
  }
  const bool model_from_plan = config.model_path.empty();
  if (model_from_plan) {
    const schema::ModelLocation model = schema::locate_model(plan.model.path, flags.plan);
    config.model_path = model.path;
    if (model.from_current_directory) {
      std::cerr << "mfsdp: warning: " << flags.plan << " names model " << plan.model.path
                << ", which is not beside the plan (model.path is relative to the plan file); "
                   "using "
                << plan.model.path
                << " in the current directory, as plans made before that rule meant; re-plan, "
                   "or pass --model\n";
    }
  }
  // Caught here, once, instead of by every rank's loader: say where the path came from.
  if (!std::filesystem::is_regular_file(config.model_path, error)) {
    if (model_from_plan) {
      fail(ExitCode::kUsage, config.model_path + ": no such model file; " + flags.plan +
                                 " names it as " + plan.model.path +
                                 ", relative to the plan file's directory; move the model "
                                 "there, or pass --model PATH");
    }
    fail(ExitCode::kUsage, config.model_path + ": no such model file (--model)");
  }
  // The plan's training section fills in what the command line did not give.
  if (plan.training) {
    executor::apply_plan_training(*plan.training, config,
                                  [&cmd](const std::string& flag) { return cmd.count(flag) > 0; });
  }
  if (cmd.count("--steps") == 0 && !(plan.training && plan.training->steps)) {
    fail(ExitCode::kUsage, "--steps is required (the plan has no training.steps)");
  }
  config.data.kind =
      flags.data_kind.empty() ? executor::infer_data_kind(flags.data) : flags.data_kind;
  if (config.data.kind != "synthetic") config.data.path = flags.data;
  config.data.input_dtype = flags.input_dtype.empty() ? "int64" : flags.input_dtype;
  if (!flags.input_shape.empty()) {
    config.data.sample_shape = parse_shape(flags.input_shape);
  } else if (config.data.kind == "synthetic" && config.data.seq_len == 0) {
    use_traced_input(plan, flags.input_dtype, config.data);
  }
  if (!flags.betas.empty()) parse_betas(flags.betas, config.optimizer);
  if (flags.clip_grad_norm != 0) config.clip_grad_norm = flags.clip_grad_norm;
  // Bounded so that it fits in milliseconds (1e30 or inf overflowed to a negative timeout).
  constexpr double kMaxCollectiveTimeoutS = 30 * 24 * 3600;
  if (!(flags.collective_timeout_s > 0 && flags.collective_timeout_s <= kMaxCollectiveTimeoutS)) {
    fail(ExitCode::kUsage,
         "--collective-timeout must be a positive number of seconds, at most 2592000 (30 days)");
  }
  config.context.collective_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(flags.collective_timeout_s * 1000));
  config.threads = flags.threads > 0 ? flags.threads : env_threads();
  return config;
}

// Launcher flags that no plan can make right (0 would otherwise mean "not given").
// Whole numbers are in range already (read_whole_numbers).
void check_launch_flags(const RunFlags& flags, const CLI::App& cmd) {
  if (cmd.count("--master-addr") > 0 && flags.master_addr.empty()) {
    fail(ExitCode::kUsage,
         "--master-addr is empty; give node 0's host name or address (127.0.0.1 by default)");
  }
}

// The cores this process may run on (its affinity mask, which containers and `taskset`
// narrow), at least 1.
int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

// Each worker's intra-op threads, as torchrun sizes them: --threads, else the user's
// OMP_NUM_THREADS (inherited as it is), else the cores shared out among this node's workers,
// so that N workers do not each start a pool as large as the machine. LibTorch reads
// OMP_NUM_THREADS and the BLAS libraries their own variables when a worker starts.
void set_worker_threads(const RunFlags& flags, launch::LaunchOptions& options) {
  const char* user = std::getenv("OMP_NUM_THREADS");
  if (flags.threads == 0 && user != nullptr && *user != '\0') return;
  const int threads =
      flags.threads > 0 ? flags.threads : std::max(1, available_cores() / flags.nproc_per_node);
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}) {
    options.extra_env.push_back({name, std::to_string(threads)});
  }
}

// --device cuda: whether this node's ranks can each use a GPU, asked before any worker
// starts, with the answer and exit code every rank would give.
void check_gpus_here(const RunFlags& flags, int world) {
  for (int local = 0; local < flags.nproc_per_node; ++local) {
    executor::LaunchEnv env;
    env.world_size = world;
    env.local_world_size = flags.nproc_per_node;
    env.local_rank = local;
    env.rank = flags.node_rank * flags.nproc_per_node + local;
    const executor::GpuAvailability gpu = executor::gpu_availability(env);
    if (!gpu.available) {
      fail(ExitCode::kRuntime, "rank " + std::to_string(env.rank) + " cannot train on a GPU: " +
                                   gpu.why_not + "; " + gpu.fix + ", or train with --device cpu");
    }
  }
}

// Output files, checked before any worker starts: a directory that is missing or read-only
// would otherwise be found only when rank 0 writes there, after training (--save-model), or at
// the first checkpoint.
// Rank 0 writes --save-model and --trace, so only node 0 checks them; every rank appends
// to --metrics.
void check_outputs_writable(const executor::TrainConfig& config, int node_rank) {
  auto check = [](const char* flag, const std::string& path) {
    if (path.empty()) return;
    std::filesystem::path directory = std::filesystem::path(path).parent_path();
    if (directory.empty()) directory = ".";
    std::error_code error;
    if (!std::filesystem::is_directory(directory, error)) {
      fail(ExitCode::kIo, std::string(flag) + " " + path + ": the directory " + directory.string() +
                              " does not exist; create it first");
    }
    if (::access(directory.c_str(), W_OK) != 0) {
      fail(ExitCode::kIo, std::string(flag) + " " + path + ": cannot write into " +
                              directory.string() + " (" + std::strerror(errno) + ")");
    }
  };
  if (node_rank == 0) {
    check("--save-model", config.save_model);
    check("--trace", config.trace_path);
  }
  check("--metrics", config.metrics_path);
  // Every rank writes into --checkpoint-dir, which rank 0 creates with its parents: the nearest
  // part of it that exists must be a directory this user may write into.
  if (!config.checkpoint_dir.empty()) {
    const std::string& dir = config.checkpoint_dir;
    std::error_code error;
    std::filesystem::path existing = dir;
    while (!std::filesystem::exists(existing, error)) {
      const std::filesystem::path parent = existing.parent_path();
      existing = parent.empty() ? std::filesystem::path(".") : parent;
    }
    if (!std::filesystem::is_directory(existing, error)) {
      fail(ExitCode::kIo, "--checkpoint-dir " + dir + ": " + existing.string() +
                              " is a file, not a directory; choose another directory");
    }
    if (::access(existing.c_str(), W_OK) != 0) {
      fail(ExitCode::kIo, "--checkpoint-dir " + dir + ": cannot write into " + existing.string() +
                              " (" + std::strerror(errno) + ")");
    }
  }
}

void run(RunFlags& flags, const CLI::App& cmd, int argc, char** argv) {
  read_whole_numbers(flags, cmd);
  const auto external =
      launch::external_worker_env(launch::current_environment(), flags.master_addr,
                                  flags.master_port > 0 ? flags.master_port : 0);
  if (external) {
    // Our own workers get the launcher's arguments back, --nproc-per-node included.
    const char* ours = std::getenv("MFSDP_RUN_WORKER");
    if (flags.nproc_per_node != 0 && !(ours && std::string(ours) == "1")) {
      fail(ExitCode::kUsage,
           "this process was started as one rank by another launcher (RANK, SLURM_PROCID or "
           "OMPI_COMM_WORLD_RANK is set), so --nproc-per-node does not apply; drop it");
    }
    for (const auto& [name, value] : *external) setenv(name.c_str(), value.c_str(), 1);
    if (!flags.rdzv_bind.empty()) setenv("MFSDP_RDZV_BIND", flags.rdzv_bind.c_str(), 1);
    executor::TrainConfig config = resolve(flags, cmd, load_plan(flags.plan));
    const char* live = std::getenv("MFSDP_LIVE_PROGRESS");
    config.live_progress = live ? std::string(live) == "1" : isatty(STDOUT_FILENO) == 1;
    executor::train(config, executor::LaunchEnv::from_environment(), std::cout);
    return;
  }

  // The launcher: check what can be checked here, so a bad flag fails once, not per rank.
  check_launch_flags(flags, cmd);
  const schema::Plan plan = load_plan(flags.plan);
  const int64_t world = plan.mesh.world_size;
  if (flags.nproc_per_node == 0) {
    if (world % flags.nnodes != 0) {
      fail(ExitCode::kUsage, flags.plan + " is for " + std::to_string(world) +
                                 " ranks, which --nnodes " + std::to_string(flags.nnodes) +
                                 " does not divide; pass --nproc-per-node");
    }
    flags.nproc_per_node = static_cast<int>(world / flags.nnodes);
  }
  const int64_t launched = static_cast<int64_t>(flags.nnodes) * flags.nproc_per_node;
  if (launched != world) {
    fail(ExitCode::kUsage, flags.plan + " is for " + std::to_string(world) +
                               " ranks but --nnodes " + std::to_string(flags.nnodes) +
                               " x --nproc-per-node " + std::to_string(flags.nproc_per_node) +
                               " launches " + std::to_string(launched) +
                               "; re-plan with --world-size " + std::to_string(launched) +
                               " or launch " + std::to_string(world));
  }
  const executor::TrainConfig config = resolve(flags, cmd, plan);
  executor::check_train_config(config, static_cast<int>(world));
  check_outputs_writable(config, flags.node_rank);
  if (config.context.device == "cuda") check_gpus_here(flags, static_cast<int>(world));

  launch::LaunchOptions options;
  options.argv.push_back(self_executable());
  for (int i = 1; i < argc; ++i) options.argv.push_back(argv[i]);
  options.nproc_per_node = flags.nproc_per_node;
  options.nnodes = flags.nnodes;
  options.node_rank = flags.node_rank;
  if (!flags.master_addr.empty()) options.master_addr = flags.master_addr;
  if (flags.master_port >= 0) options.master_port = flags.master_port;
  options.log_dir = flags.log_dir;
  options.grace = std::chrono::milliseconds(static_cast<int64_t>(flags.grace_s * 1000));
  const bool live = flags.log_dir.empty() && isatty(STDOUT_FILENO) == 1;
  options.extra_env.push_back({"MFSDP_LIVE_PROGRESS", live ? "1" : "0"});
  options.extra_env.push_back({"MFSDP_RUN_WORKER", "1"});
  // The rendezvous secret: the user's, checked here once, else a fresh one for this run. Only a
  // single-node launcher may make it up, since every node must hold the same one. Checked after
  // the launcher's own flags, so that a node rank out of range is named first.
  launch::check_options(options);
  if (!executor::rendezvous_secret_from_environment()) {
    if (flags.nnodes > 1) {
      fail(ExitCode::kUsage,
           "a run over --nnodes " + std::to_string(flags.nnodes) +
               " needs a rendezvous secret that every node shares: export "
               "MFSDP_RDZV_SECRET=$(openssl rand -hex 32) with the same value on each node "
               "before mfsdp run (docs/launch.md, Security)");
    }
    options.extra_env.push_back({"MFSDP_RDZV_SECRET", executor::new_rendezvous_secret()});
  }
  if (!flags.rdzv_bind.empty()) options.extra_env.push_back({"MFSDP_RDZV_BIND", flags.rdzv_bind});
  set_worker_threads(flags, options);
  std::cout.flush();
  std::cerr.flush();
  const int status = launch::launch(options);
  if (status != 0) exit_with(static_cast<ExitCode>(status));
}

}  // namespace

void add_run_command(CLI::App& app, int argc, char** argv) {
  auto flags = std::make_shared<RunFlags>();
  executor::TrainConfig& t = flags->train;
  t.data.global_batch = 8;
  CLI::App* cmd = app.add_subcommand("run", "Train a model by a plan: start the ranks, or be one");
  cmd->footer(kExamples);
  // A flag given twice takes its last value, so a wrapper script's defaults can be overridden.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  const auto whole = [&](const std::string& name, const std::string& help) {
    kWholeFlags.at(name);  // every whole-number flag has its range
    return cmd->add_option(name, flags->whole[name], help)->type_name("INT");
  };
  cmd->add_option("plan", flags->plan, "Plan file written by mfsdp plan")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--model", t.model_path,
                  "TorchScript model (default: the plan's model.path, relative to the plan file's "
                  "directory)");

  const char* launcher = "Launcher";
  whole("--nproc-per-node",
        "Workers to start on this node (default: the plan's world size / --nnodes)")
      ->group(launcher);
  whole("--nnodes", "Number of nodes (default 1)")->group(launcher);
  whole("--node-rank", "This node's index, 0..nnodes-1 (default 0)")->group(launcher);
  cmd->add_option("--master-addr", flags->master_addr,
                  "Host of rank 0's rendezvous store (default 127.0.0.1)")
      ->group(launcher);
  whole("--master-port",
        "Its TCP port, 1..65535 (default 29500; 0 picks a free one on a single node)")
      ->group(launcher);
  cmd->add_option("--rdzv-bind", flags->rdzv_bind,
                  "Address rank 0's store listens on (default: --master-addr, so loopback on one "
                  "node; 0.0.0.0 for every interface)")
      ->group(launcher);
  cmd->add_option("--log-dir", flags->log_dir,
                  "Write each rank's output to DIR/rank-N.log instead of prefixing it")
      ->group(launcher);
  cmd->add_option("--grace", flags->grace_s,
                  "Seconds workers get after SIGTERM before SIGKILL (default 10)")
      ->group(launcher);
  whole("--threads",
        "Intra-op threads per worker, for LibTorch and BLAS, 1..65536 (default: OMP_NUM_THREADS "
        "if set, else this node's cores / its workers, at least 1)")
      ->group(launcher);

  const char* data = "Data and loss";
  cmd->add_option("--data", flags->data,
                  "synthetic (default), or a file: .txt bytes, .bin uint16 tokens, .pt tensors")
      ->group(data);
  cmd->add_option("--data-kind", flags->data_kind, "Force the kind: synthetic|text|tokens|tensors")
      ->group(data);
  whole("--seq-len", "Tokens per sample for text and token data, 1 to " + kInt32Max)->group(data);
  whole("--vocab-size",
        "Token ids must be below it (default: the model's first nn.Embedding; 256 for text)")
      ->group(data);
  cmd->add_option("--input-shape", flags->input_shape,
                  "Synthetic: one sample's input shape, e.g. 64, 3x32x32 or 3,32,32 (default: the "
                  "plan's first "
                  "--trace-input without its batch dimension)")
      ->group(data);
  cmd->add_option("--input-dtype", flags->input_dtype,
                  "Synthetic: int64 (token ids, default) or float32 (default: the traced input's)")
      ->group(data);
  cmd->add_option("--loss", t.loss,
                  "cross_entropy (default; next-token for LMs), mse, or model (forward(input, "
                  "target) returns the loss)")
      ->group(data);
  whole("--seed", "Seed of the data, 0 or more (default 0)")->group(data);

  const char* training = "Training";
  whole("--steps", "Optimizer steps, at least 1 (required unless the plan has training.steps)")
      ->group(training);
  whole("--global-batch", "Samples per optimizer step over all ranks and microbatches (default 8)")
      ->group(training);
  whole("--microbatches", "Gradient accumulation: microbatches per step and rank (default 1)")
      ->group(training);
  cmd->add_option("--optimizer", t.optimizer.kind, "sgd, adam or adamw (default)")->group(training);
  cmd->add_option("--lr", t.optimizer.lr, "Peak learning rate (default 1e-3)")->group(training);
  cmd->add_option("--weight-decay", t.optimizer.weight_decay, "Weight decay (default 0)")
      ->group(training);
  cmd->add_option("--betas", flags->betas, "Adam betas, e.g. 0.9,0.95 (default 0.9,0.999)")
      ->group(training);
  cmd->add_option("--momentum", t.optimizer.momentum, "SGD momentum (default 0)")->group(training);
  whole("--warmup", "Linear warmup steps (default 0)")->group(training);
  cmd->add_option("--lr-schedule", t.lr_schedule,
                  "constant (default) or cosine (decays to 10% of --lr at the last step)")
      ->group(training);
  cmd->add_option("--clip-grad-norm", flags->clip_grad_norm,
                  "Clip the global gradient norm to this value (default: no clipping)")
      ->group(training);
  t.context.device = "auto";
  cmd->add_option("--device", t.context.device,
                  "auto (default: each rank's GPU when every rank has one and this mfsdp can use "
                  "it, else the CPU), cuda (GPUs or fail) or cpu (docs/gpu.md)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->group(training);
  cmd->add_flag("--strict-order", t.context.strict_order,
                "Fail when the first step skips a unit the plan has (default: warn)")
      ->group(training);
  cmd->add_option("--collective-timeout", flags->collective_timeout_s,
                  "Seconds before a stuck collective fails the run (default 1800)")
      ->group(training);

  const char* outputs = "Checkpoints and outputs";
  cmd->add_option("--checkpoint-dir", t.checkpoint_dir,
                  "Directory for checkpoints (step-N/); a filesystem all ranks see")
      ->group(outputs);
  whole("--checkpoint-every", "Save every K steps (default 0: only at the end)")->group(outputs);
  whole("--keep-checkpoints", "Newest checkpoints to keep (default 2; 0 keeps all)")
      ->group(outputs);
  cmd->add_option("--resume", t.resume_from,
                  "Continue from the newest complete checkpoint in --checkpoint-dir (if any), or "
                  "from CKPT (a step directory or a directory of them); a checkpoint of another "
                  "plan of the model (world size, mesh, units) is resharded")
      ->expected(0, 1)
      ->type_name("[CKPT]")
      ->group(outputs);
  cmd->add_option("--save-model", t.save_model,
                  "Write the trained model as TorchScript here at the end")
      ->group(outputs);
  cmd->add_option("--metrics", t.metrics_path, "Append one JSON line per step and rank here")
      ->group(outputs);
  cmd->add_option("--trace", t.trace_path,
                  "Write a Chrome/Perfetto trace of a few steps (per rank: compute and streams)")
      ->group(outputs);
  whole("--trace-steps", "Steps to trace, from the second, 1 to " + kInt32Max + " (default 3)")
      ->group(outputs);
  whole("--log-every", "Print a progress line every N steps (default 10)")->group(outputs);
  cmd->add_flag("--verbose", t.verbose,
                "When the model fails on the first batch (exit 2), also print its TorchScript "
                "traceback")
      ->group(outputs);
  cmd->callback([flags, cmd, argc, argv] { run(*flags, *cmd, argc, argv); });
}

}  // namespace mfsdp::cli
