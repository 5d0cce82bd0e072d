// `mfsdp run plan.json ...`: the launcher and, in each worker it starts, the training loop.
//
// Over 400 lines: `mfsdp run`'s flags, their help and examples, and their resolution against
// the plan's training defaults into one TrainConfig, checked before any worker starts; the
// launcher is executor/launch/ and the training loop executor/train/.
#include "cli/run_command.h"

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
#include "cli/duration_flag.h"
#include "cli/rank_launch.h"
#include "cli/whole_number.h"
#include "executor/launch/launcher.h"
#include "executor/runtime/cuda_runtime.h"
#include "executor/train/data.h"
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
  std::string progress = "auto";
  LauncherFlags launcher;
};

// Whether rank 0 redraws its status line in place ('\r', ESC[K) between logged lines. `auto`
// does only when mfsdp's own launcher writes to a terminal (it says so in
// MFSDP_LIVE_PROGRESS): a worker of torchrun, mpirun or srun prints plain lines even when its
// stdout is a pty (Open MPI gives workers one), since those launchers merge the ranks' output
// into pipes and logs.
bool redraws_progress(const std::string& progress, bool own_launcher_on_terminal) {
  if (progress == "bar") return true;
  if (progress == "lines") return false;
  return own_launcher_on_terminal;
}

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

// Every whole-number flag but the launcher's (rank_launch.h) and the values it takes
// (docs/run.md#whole-number-flags). Counts of steps and samples may be any positive int64;
// sequence lengths and traced steps are bounded so that adding one window or one step to them
// cannot overflow.
const std::map<std::string, WholeRange> kWholeFlags = {
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
  read_launcher_flags(flags.launcher, cmd);
  executor::TrainConfig& t = flags.train;
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
  config.context.collective_timeout =
      seconds_flag(flags.collective_timeout_s, "--collective-timeout", false);
  config.threads = flags.launcher.threads > 0 ? flags.launcher.threads : env_threads();
  return config;
}

// --device cuda: whether this node's ranks can each use a GPU, asked before any worker
// starts, with the answer and exit code every rank would give.
void check_gpus_here(const LauncherFlags& flags, int world) {
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
  if (node_rank == 0) {
    check_output_directory("--save-model", config.save_model);
    check_output_directory("--trace", config.trace_path);
  }
  check_output_directory("--metrics", config.metrics_path);
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

// A schedule the flags accept that cannot be what was meant.
void warn_about_schedule(const executor::TrainConfig& config) {
  if (config.warmup_steps > config.steps) {
    std::cerr << "mfsdp: warning: --warmup " << config.warmup_steps << " is longer than --steps "
              << config.steps
              << ": the learning rate never reaches --lr (it is still warming up at the last "
                 "step); lower --warmup or raise --steps\n";
  }
}

// Under torchrun --max-restarts, a worker started again after a failure carries on from the
// newest complete checkpoint, as `--resume` would, instead of training again from step 0.
void resume_after_torchrun_restart(executor::TrainConfig& config) {
  const char* count = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (count == nullptr || *count == '\0' || std::string(count) == "0") return;
  const char* rank = std::getenv("RANK");
  const bool rank0 = rank != nullptr && std::string(rank) == "0";
  const char* max = std::getenv("TORCHELASTIC_MAX_RESTARTS");
  const std::string restart =
      std::string("torchrun restart ") + count +
      (max != nullptr && *max != '\0' ? std::string(" of at most ") + max : std::string());
  if (config.resume) {
    if (rank0) std::cout << "mfsdp run: " << restart << ": resuming as --resume says\n";
  } else if (config.checkpoint_dir.empty()) {
    if (rank0) {
      std::cerr << "mfsdp: warning: " << restart
                << " without --checkpoint-dir: training starts again from step 0; pass "
                   "--checkpoint-dir and --checkpoint-every to resume after a restart\n";
    }
  } else {
    config.resume = true;  // no --resume value: the newest complete checkpoint there, if any
    if (rank0) {
      std::cout << "mfsdp run: " << restart << ": resuming from the newest complete checkpoint in "
                << config.checkpoint_dir << " (from step 0 if it holds none yet)\n";
    }
  }
  std::cout.flush();
}

void run(RunFlags& flags, const CLI::App& cmd, int argc, char** argv) {
  read_whole_numbers(flags, cmd);
  LauncherFlags& launcher = flags.launcher;
  if (join_as_rank(launcher)) {
    executor::TrainConfig config = resolve(flags, cmd, load_plan(flags.plan));
    resume_after_torchrun_restart(config);
    const char* rank = std::getenv("RANK");
    const char* ours = std::getenv("MFSDP_RUN_WORKER");
    // Our own launcher has warned already; another launcher's rank 0 warns once for all.
    if (rank != nullptr && std::string(rank) == "0" && !(ours && std::string(ours) == "1")) {
      warn_about_schedule(config);
    }
    const char* live = std::getenv("MFSDP_LIVE_PROGRESS");
    config.live_progress =
        redraws_progress(flags.progress, live != nullptr && std::string(live) == "1");
    executor::train(config, executor::LaunchEnv::from_environment(), std::cout);
    return;
  }

  // The launcher: check what can be checked here, so a bad flag fails once, not per rank.
  check_launch_flags(launcher, cmd);
  const schema::Plan plan = load_plan(flags.plan);
  const int64_t world = plan.mesh.world_size;
  if (launcher.nproc_per_node == 0) {
    if (world % launcher.nnodes != 0) {
      fail(ExitCode::kUsage, flags.plan + " is for " + std::to_string(world) +
                                 " ranks, which --nnodes " + std::to_string(launcher.nnodes) +
                                 " does not divide; pass --nproc-per-node");
    }
    launcher.nproc_per_node = static_cast<int>(world / launcher.nnodes);
  }
  const int64_t launched = static_cast<int64_t>(launcher.nnodes) * launcher.nproc_per_node;
  if (launched != world) {
    fail(ExitCode::kUsage, flags.plan + " is for " + std::to_string(world) +
                               " ranks but --nnodes " + std::to_string(launcher.nnodes) +
                               " x --nproc-per-node " + std::to_string(launcher.nproc_per_node) +
                               " launches " + std::to_string(launched) +
                               "; re-plan with --world-size " + std::to_string(launched) +
                               " or launch " + std::to_string(world));
  }
  const executor::TrainConfig config = resolve(flags, cmd, plan);
  executor::check_train_config(config, static_cast<int>(world));
  check_outputs_writable(config, launcher.node_rank);
  if (config.context.device == "cuda") check_gpus_here(launcher, static_cast<int>(world));

  launch::LaunchOptions options = rank_launch_options(launcher, argc, argv, "run");
  // After the launcher's own flags, so that a node rank out of range is named first.
  executor::check_data(config.data);
  warn_about_schedule(config);
  const bool live = launcher.log_dir.empty() && isatty(STDOUT_FILENO) == 1;
  options.extra_env.push_back({"MFSDP_LIVE_PROGRESS", live ? "1" : "0"});
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
  cmd->add_option("--init-from", t.context.init_from,
                  "Start from these weights instead of the model file's: a .safetensors file, or "
                  "a directory with model.safetensors.index.json (each rank reads only its "
                  "slices; floating dtypes are converted; docs/large-models.md)")
      ->check(CLI::ExistingPath);
  cmd->add_option("--name-map", t.context.name_map,
                  "With --init-from: a JSON file of rules that rename the file's tensors to the "
                  "model's parameters, skip some, or read 2-D ones transposed (GPT-2's Conv1D; "
                  "docs/large-models.md#name-maps)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--init", t.context.init,
                  "Start from values by rule instead: normal:STD gives weights of 2+ dimensions "
                  "normal(0, STD), biases 0 and other 1-D parameters (norm scales) 1, seeded by "
                  "--seed; each rank computes only its shards, the same at any world size "
                  "(docs/large-models.md#initialiser)");

  add_launcher_flags(*cmd, flags->launcher, "the plan's world size / --nnodes");

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
  whole("--seed", "Seed of the data and of --init, 0 or more (default 0)")->group(data);

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
                  "Directory for checkpoints (step-N/); a filesystem all ranks see. A worker that "
                  "torchrun --max-restarts starts again resumes from its newest")
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
  cmd->add_option("--progress", flags->progress,
                  "Between logged lines, redraw a status line in place: auto (default: when "
                  "mfsdp's own launcher writes to a terminal; never under torchrun, mpirun or "
                  "srun, nor into a pipe or file), bar (always) or lines (never)")
      ->check(CLI::IsMember({"auto", "bar", "lines"}))
      ->group(outputs);
  cmd->add_flag("--verbose", t.verbose,
                "When the model fails on the first batch (exit 2), also print its TorchScript "
                "traceback")
      ->group(outputs);
  cmd->callback([flags, cmd, argc, argv] { run(*flags, *cmd, argc, argv); });
}

}  // namespace mfsdp::cli
