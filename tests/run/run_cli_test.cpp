// `mfsdp run` as users run it: plan, launch 2 local ranks, train. The loss curve and the
// trained parameters are compared against plain single-process LibTorch training of the same
// model on the same global batches (torch::optim, autograd; no executor code).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <future>
#include <map>
#include <set>
#include <thread>

#include <torch/script.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "executor/comm/store.h"
#include "executor/train/checkpoint.h"
#include "executor/train/data.h"
#include "executor/train/loss.h"
#include "executor/train/sharded_optimizer.h"
#include "executor/train/trainer.h"
#include "schema/plan_json.h"
#include "schema/plan_loader.h"
#include "tests/cli/cli_test_support.h"
#include "tests/executor/comm/stranger_flood.h"

namespace mfsdp::testing {
namespace {

const std::string kModel = "tests/fixtures/tied_lm.pt";
const std::string kCorpus = "examples/tiny_corpus.txt";

std::string plan_for(int world, const std::string& name) {
  const std::string path = temp_path(name + ".plan.json");
  const RunResult r = mfsdp({"plan", kModel, "--world-size", std::to_string(world), "--unit",
                             "layers.*", "--unit", "<root>", "-o", path, "-q"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

// The training flags every run here shares, as a config the reference can read too.
executor::TrainConfig shared_config(int64_t steps) {
  executor::TrainConfig c;
  c.steps = steps;
  c.data.kind = "text";
  c.data.path = kRepo + "/" + kCorpus;
  c.data.seq_len = 16;
  c.data.global_batch = 12;
  c.data.microbatches = 2;
  c.data.seed = 7;
  c.data.vocab_size = 256;
  c.optimizer.kind = "sgd";
  c.optimizer.lr = 0.05;
  c.optimizer.momentum = 0.9;
  c.warmup_steps = 2;
  c.lr_schedule = "cosine";
  c.clip_grad_norm = 1.0;
  return c;
}

std::vector<std::string> run_args(const std::string& plan, const executor::TrainConfig& c) {
  return {"run",
          plan,
          "--data",
          kCorpus,
          "--seq-len",
          std::to_string(c.data.seq_len),
          "--global-batch",
          std::to_string(c.data.global_batch),
          "--microbatches",
          std::to_string(c.data.microbatches),
          "--seed",
          std::to_string(c.data.seed),
          "--optimizer",
          c.optimizer.kind,
          "--lr",
          "0.05",
          "--momentum",
          "0.9",
          "--warmup",
          std::to_string(c.warmup_steps),
          "--lr-schedule",
          c.lr_schedule,
          "--clip-grad-norm",
          "1",
          "--steps",
          std::to_string(c.steps),
          "--master-port",
          "0",
          "--collective-timeout",
          "60"};
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

struct Reference {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> params;
};

// One process, the whole global batch at once: what 2 ranks x 2 microbatches must equal.
Reference train_reference(const executor::TrainConfig& config) {
  torch::jit::Module model = torch::jit::load(kRepo + "/" + kModel);
  model.train();
  std::vector<at::Tensor> params;
  std::set<const void*> seen;
  for (const auto& p : model.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
  }
  auto optimizer = executor::make_optimizer(params, config.optimizer);
  executor::DataConfig data = config.data;
  data.microbatches = 1;
  auto source = executor::open_data(data, 0, 1);
  const executor::Loss loss(executor::LossKind::kCrossEntropy, data);
  Reference out;
  for (int64_t step = 0; step < config.steps; ++step) {
    for (auto& group : optimizer->param_groups()) {
      static_cast<torch::optim::SGDOptions&>(group.options())
          .lr(executor::learning_rate(config, step));
    }
    const executor::Batch batch = source->batch(step, 0);
    const at::Tensor value = loss.compute(model.forward(loss.forward_inputs(batch)), batch);
    optimizer->zero_grad();
    value.backward();
    torch::nn::utils::clip_grad_norm_(params, *config.clip_grad_norm);
    optimizer->step();
    out.losses.push_back(value.item<double>());
  }
  for (const auto& p : model.named_parameters()) out.params[p.name] = p.value.detach().clone();
  return out;
}

std::vector<nlohmann::json> metric_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::map<std::string, at::Tensor> saved_parameters(const std::string& path) {
  std::map<std::string, at::Tensor> out;
  torch::jit::Module m = torch::jit::load(path);
  for (const auto& p : m.named_parameters()) out[p.name] = p.value.detach();
  return out;
}

double relative_difference(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-12);
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / scale;
}

TEST(RunCli, TwoRanksTrainLikeOneProcessOnTheGlobalBatch) {
  const executor::TrainConfig config = shared_config(6);
  const std::string plan = plan_for(2, "run_parity");
  const std::string metrics = temp_path("run_parity.jsonl");
  const std::string saved = temp_path("run_parity_trained.pt");
  const RunResult r = mfsdp(with(run_args(plan, config), {"--nproc-per-node", "2", "--metrics",
                                                          metrics, "--save-model", saved}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0] done: 6 steps"), std::string::npos) << r.out;

  const Reference reference = train_reference(config);
  std::map<int64_t, double> losses;  // step -> loss, from rank 0's lines
  int64_t lines_per_rank[2] = {0, 0};
  std::vector<nlohmann::json> memory;  // each rank's breakdown, written last
  for (const auto& j : metric_lines(metrics)) {
    const int rank = j.at("rank").get<int>();
    ASSERT_TRUE(rank == 0 || rank == 1) << j.dump();
    if (j.contains("memory")) {
      memory.push_back(j.at("memory"));
      continue;
    }
    ++lines_per_rank[rank];
    for (const char* field : {"step", "loss", "rank_loss", "lr", "grad_norm", "step_ms",
                              "exposed_comm_ms", "samples_per_s", "peak_unsharded_bytes",
                              "rss_bytes", "tensor_bytes", "page_faults", "time"}) {
      EXPECT_TRUE(j.contains(field)) << field << " missing in " << j.dump();
    }
    EXPECT_GE(j.value("page_faults", int64_t{-1}), 0) << j.dump();
    if (rank == 0) losses[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
  }
  EXPECT_EQ(lines_per_rank[0], 6);
  EXPECT_EQ(lines_per_rank[1], 6);
  // The breakdown (docs/run.md#memory): its parts are this run's real sizes, and they add up
  // to the peak with what is left over.
  ASSERT_EQ(memory.size(), 2u);
  const schema::Memory planned = schema::read_plan_file(plan).plan.memory;
  // What a rank reads of the model file (docs/large-models.md): every buffer, and its slice of
  // each parameter by the plan's flat layout.
  const schema::Plan full_plan = schema::read_plan_file(plan).plan;
  auto model_bytes_read = [&](int64_t rank) {
    int64_t bytes = 0;
    for (const auto& b : torch::jit::load(kRepo + "/" + kModel).named_buffers()) {
      bytes += b.value.numel() * b.value.element_size();
    }
    for (const schema::Unit& unit : full_plan.units) {
      for (const schema::Group& group : unit.groups) {
        const int64_t begin = rank * group.shard_numel, end = begin + group.shard_numel;
        for (const auto& p : group.params) {
          const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
          if (hi > lo) bytes += (hi - lo) * 4;  // float32
        }
      }
    }
    return bytes;
  };
  for (const auto& m : memory) {
    SCOPED_TRACE(m.dump());
    EXPECT_EQ(m.at("sharded_param_bytes").get<int64_t>(), planned.sharded_param_bytes);
    EXPECT_EQ(m.at("main_grad_bytes").get<int64_t>(), planned.sharded_grad_bytes);
    // SGD with momentum: one buffer per master element.
    EXPECT_EQ(m.at("optimizer_state_bytes").get<int64_t>(), planned.sharded_param_bytes);
    EXPECT_EQ(m.at("slot_bytes").get<int64_t>(), planned.slot_bytes);
    EXPECT_EQ(m.at("model_as_loaded_bytes").get<int64_t>(),
              model_bytes_read(m.at("rank").get<int64_t>()));
    EXPECT_GT(m.at("runtime_base_bytes").get<int64_t>(), 0);
    EXPECT_GT(m.at("activation_peak_bytes").get<int64_t>(), 0);
    EXPECT_GE(m.at("setup_peak_rss_bytes").get<int64_t>(),
              m.at("runtime_base_bytes").get<int64_t>());
    int64_t accounted = m.at("peak_rss_bytes").get<int64_t>() - m.at("other_bytes").get<int64_t>();
    // Training pages in some of LibTorch's code the base had not touched, and the loaded
    // module's code and graphs are objects on malloc's heap.
    EXPECT_GT(m.at("code_bytes").get<int64_t>(), 0);
    EXPECT_GT(m.at("heap_object_bytes").get<int64_t>(), 0);
    EXPECT_GE(m.at("cache_bytes").get<int64_t>(), 0);
    for (const char* part :
         {"runtime_base_bytes", "sharded_param_bytes", "main_grad_bytes", "optimizer_state_bytes",
          "slot_bytes", "cache_bytes", "code_bytes", "heap_object_bytes"}) {
      accounted -= m.at(part).get<int64_t>();
    }
    EXPECT_EQ(accounted, std::max(m.at("activation_peak_bytes").get<int64_t>(),
                                  m.at("optimizer_step_peak_bytes").get<int64_t>()));
  }
  EXPECT_NE(r.out.find("[rank 0] memory per rank, MiB"), std::string::npos) << r.out;
  ASSERT_EQ(losses.size(), reference.losses.size());
  for (size_t s = 0; s < reference.losses.size(); ++s) {
    EXPECT_NEAR(losses.at(static_cast<int64_t>(s) + 1), reference.losses[s],
                1e-5 * std::abs(reference.losses[s]))
        << "step " << s + 1;
  }
  EXPECT_LT(reference.losses.back(), reference.losses.front());  // it learned something

  const auto trained = saved_parameters(saved);
  ASSERT_EQ(trained.size(), reference.params.size());
  for (const auto& [name, want] : reference.params) {
    ASSERT_TRUE(trained.count(name)) << name;
    EXPECT_LE(relative_difference(trained.at(name), want), 1e-5) << name;
  }
  // The exported file keeps the tie: one tensor under both names.
  torch::jit::Module m = torch::jit::load(saved);
  EXPECT_EQ(m.attr("lm_head").toModule().attr("weight").toTensor().data_ptr(),
            m.attr("wte").toModule().attr("weight").toTensor().data_ptr());
}

// Trains `plan` on 2 ranks (3 steps of two microbatches) and expects the losses of
// single-process training, and every step's measured peak of gathered bytes to be the plan's.
void expect_two_ranks_train_like_one_process(const std::string& plan, const std::string& name) {
  const executor::TrainConfig config = shared_config(3);
  const std::string metrics = temp_path(name + ".jsonl");
  std::filesystem::remove(metrics);
  const RunResult r =
      mfsdp(with(run_args(plan, config), {"--nproc-per-node", "2", "--metrics", metrics}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const Reference reference = train_reference(config);
  std::map<int64_t, double> losses;
  const int64_t planned_peak = schema::read_plan_file(plan).plan.memory.peak_unsharded_bytes;
  for (const auto& j : metric_lines(metrics)) {
    if (!j.contains("loss")) continue;
    EXPECT_EQ(j.at("peak_unsharded_bytes").get<int64_t>(), planned_peak) << j.dump();
    if (j.at("rank") == 0) losses[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
  }
  ASSERT_EQ(losses.size(), reference.losses.size());
  for (size_t s = 0; s < reference.losses.size(); ++s) {
    EXPECT_NEAR(losses.at(static_cast<int64_t>(s) + 1), reference.losses[s],
                1e-5 * std::abs(reference.losses[s]))
        << "step " << s + 1;
  }
}

// A unit kept gathered from its forward to its backward (--keep-after-forward) skips its
// backward all-gather and trains as before: the losses of single-process training, with the
// two microbatches of each step; the slot layer holds what the plan says (the kept unit's
// slot stays through backward).
TEST(RunCli, AUnitKeptAfterForwardTrainsLikeOneProcess) {
  const std::string plan = temp_path("run_kept.plan.json");
  const RunResult planned =
      mfsdp({"plan", kModel, "--world-size", "2", "--unit", "layers.*", "--unit", "<root>",
             "--keep-after-forward", "layers.0", "-o", plan, "-q"});
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const nlohmann::json units = nlohmann::json::parse(read_file(plan))["units"];
  for (const auto& u : units) {
    EXPECT_EQ(u["kept_after_forward"], u["name"] != "layers.1") << u.dump();
  }
  expect_two_ranks_train_like_one_process(plan, "run_kept");
}

// A merged unit ('layers.0+layers.1': both blocks gathered by one all-gather) trains like one
// process, and the slots hold what the plan says.
TEST(RunCli, AMergedUnitTrainsLikeOneProcess) {
  const std::string plan = temp_path("run_merged.plan.json");
  const RunResult planned = mfsdp({"plan", kModel, "--world-size", "2", "--unit",
                                   "layers.0+layers.1", "--unit", "<root>", "-o", plan, "-q"});
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const schema::Plan read = schema::read_plan_file(plan).plan;
  ASSERT_EQ(read.units.size(), 2u);
  EXPECT_EQ(read.units[1].modules, (std::vector<std::string>{"layers.0", "layers.1"}));
  expect_two_ranks_train_like_one_process(plan, "run_merged");
}

// The activation peak a plan made with --trace-input predicts, scaled from the traced batch to
// the run's microbatch, is what each rank measures, within 10 %: on the bundled example
// (traced on 8 sequences, run on microbatches of 4) and on the tied-embedding fixture.
TEST(RunCli, TracedPlansPredictTheActivationPeak) {
  struct Case {
    std::string model, units, trace, seq_len;
    int64_t global_batch, microbatches, microbatch;
  };
  for (const Case& c : {Case{"examples/bytegpt.pt", "layers.*", "8x64:int64", "64", 16, 2, 4},
                        Case{kModel, "layers.*", "4x16:int64", "16", 24, 3, 4}}) {
    SCOPED_TRACE(c.model);
    const std::string plan = temp_path("activations.plan.json");
    RunResult r = mfsdp({"plan", c.model, "--world-size", "2", "--unit", c.units, "--unit",
                         "<root>", "--trace-input", c.trace, "-o", plan, "-q"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const schema::Plan planned = schema::load_plan_file(plan, schema::PlanCheck::kRules);
    ASSERT_TRUE(planned.memory.activations.has_value());
    const double predicted = static_cast<double>(planned.memory.activations->peak_bytes) *
                             c.microbatch / planned.memory.activations->microbatch;

    const std::string metrics = temp_path("activations.jsonl");
    std::filesystem::remove(metrics);
    r = mfsdp({"run", plan, "--data", kCorpus, "--seq-len", c.seq_len, "--global-batch",
               std::to_string(c.global_batch), "--microbatches", std::to_string(c.microbatches),
               "--steps", "2", "--metrics", metrics, "--master-port", "0"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("planned ("), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("for microbatches of " + std::to_string(c.microbatch)), std::string::npos)
        << r.out;
    int ranks = 0;
    for (const auto& j : metric_lines(metrics)) {
      if (!j.contains("memory")) continue;
      ++ranks;
      const auto measured = j.at("memory").at("activation_peak_bytes").get<int64_t>();
      EXPECT_NEAR(static_cast<double>(measured), predicted, 0.1 * predicted)
          << "rank " << j.at("rank");
    }
    EXPECT_EQ(ranks, 2);
  }
}

TEST(RunCli, ResumingFromACheckpointIsBitExact) {
  const executor::TrainConfig config = shared_config(4);
  const std::string plan = plan_for(2, "run_resume");
  const std::string straight = temp_path("run_resume_straight.pt");
  const std::string resumed = temp_path("run_resume_resumed.pt");
  const std::string dir_a = temp_path("run_resume_a"), dir_b = temp_path("run_resume_b");
  std::filesystem::remove_all(dir_a);
  std::filesystem::remove_all(dir_b);

  const RunResult a =
      mfsdp(with(run_args(plan, config), {"--checkpoint-dir", dir_a, "--save-model", straight}));
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  // Interrupted after 2 steps (the end-of-run checkpoint), then resumed to 4.
  std::vector<std::string> first = run_args(plan, shared_config(2));
  const RunResult b1 = mfsdp(with(first, {"--checkpoint-dir", dir_b}));
  ASSERT_EQ(b1.exit_code, 0) << b1.out << b1.err;
  // A newer step whose manifest was damaged is passed over, loudly.
  const std::string damaged = dir_b + "/step-00000003";
  std::filesystem::create_directories(damaged);
  std::ofstream(damaged + "/manifest.json") << "{\"format\":";
  const RunResult b2 = mfsdp(with(
      run_args(plan, config), {"--checkpoint-dir", dir_b, "--resume", "--save-model", resumed}));
  ASSERT_EQ(b2.exit_code, 0) << b2.out << b2.err;
  EXPECT_NE(b2.out.find("resumed from " + dir_b + "/step-00000002"), std::string::npos) << b2.out;
  EXPECT_NE(b2.err.find("mfsdp: warning: --resume passes over " + damaged + " ("),
            std::string::npos)
      << b2.err;
  EXPECT_NE(b2.err.find("resuming from the newest complete one, " + dir_b + "/step-00000002"),
            std::string::npos)
      << b2.err;

  // Only damaged ones: starting over beside them is refused.
  const std::string dir_c = temp_path("run_resume_c");
  std::filesystem::remove_all(dir_c);
  std::filesystem::create_directories(dir_c + "/step-00000005");
  const RunResult c = mfsdp(with(run_args(plan, config), {"--checkpoint-dir", dir_c, "--resume"}));
  EXPECT_EQ(c.exit_code, 2) << c.out << c.err;
  EXPECT_NE(c.err.find("--resume: " + dir_c + " holds no complete checkpoint, only " + dir_c +
                       "/step-00000005 ("),
            std::string::npos)
      << c.err;

  const auto want = saved_parameters(straight);
  const auto got = saved_parameters(resumed);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, value] : want) {
    EXPECT_TRUE(torch::equal(got.at(name), value)) << name << " differs after resuming";
  }
}

// A disk that fills during a save: each worker may write files of at most 100 KiB (ulimit -f;
// the rank files are larger), which fails their writes as a full disk would. The run exits 5
// with one line naming the file and the bytes it needs instead of aborting, leaves no temp
// directory, and the checkpoint before it still resumes.
TEST(RunCli, ADiskFullDuringASaveFailsCleanlyAndKeepsTheLastCheckpoint) {
  const std::string plan = plan_for(2, "run_disk_full");
  const std::string dir = temp_path("run_disk_full_ckpt");
  std::filesystem::remove_all(dir);
  const std::vector<std::string> every_2 = {"--checkpoint-dir", dir, "--checkpoint-every", "2"};
  const RunResult first = mfsdp(with(run_args(plan, shared_config(2)), every_2));
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;

  std::vector<std::string> limited = {"-c", "trap '' XFSZ; ulimit -f 100; exec \"$0\" \"$@\"",
                                      MFSDP_BINARY};
  for (const std::string& a : with(run_args(plan, shared_config(4)), every_2)) limited.push_back(a);
  limited.push_back("--resume");
  const RunResult full = run_program("/bin/bash", limited, kRepo);
  EXPECT_EQ(full.exit_code, 5) << full.out << full.err;
  EXPECT_NE(
      full.err.find("mfsdp: error: cannot write " + dir + "/.step-00000004.saving.tmp/rank-0000"),
      std::string::npos)
      << full.err;
  EXPECT_NE(full.err.find(": File too large (this rank's file needs "), std::string::npos)
      << full.err;
  EXPECT_EQ(full.err.find("terminate called"), std::string::npos) << full.err;
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    left.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"step-00000002"});

  const RunResult resumed =
      mfsdp(with(with(run_args(plan, shared_config(4)), every_2), {"--resume"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("resumed from " + dir + "/step-00000002 (step 2)"), std::string::npos)
      << resumed.out;
}

// Workers killed in the middle of writing their rank files: under `ulimit -f 100` (without
// ignoring SIGXFSZ) the kernel kills each one the moment its file passes 100 KiB, which no
// timing can miss. The torn save is never taken for a checkpoint, and resuming from the one
// before it ends bit for bit where a run without the crash ends.
TEST(RunCli, WorkersKilledMidSaveResumeExactlyFromTheCheckpointBefore) {
  const std::string plan = plan_for(2, "run_killed_mid_save");
  const std::string dir = temp_path("run_killed_mid_save_ckpt");
  const std::string straight = temp_path("run_killed_mid_save_straight.pt");
  const std::string resumed = temp_path("run_killed_mid_save_resumed.pt");
  std::filesystem::remove_all(dir);
  const std::vector<std::string> every_2 = {"--checkpoint-dir", dir, "--checkpoint-every", "2"};
  const RunResult a = mfsdp(with(run_args(plan, shared_config(4)), {"--save-model", straight}));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const RunResult first = mfsdp(with(run_args(plan, shared_config(2)), every_2));
  ASSERT_EQ(first.exit_code, 0) << first.err;

  std::vector<std::string> killed = {"-c", "ulimit -f 100; exec \"$0\" \"$@\"", MFSDP_BINARY};
  for (const std::string& arg : with(run_args(plan, shared_config(4)), every_2)) {
    killed.push_back(arg);
  }
  killed.push_back("--resume");
  const RunResult crash = run_program("/bin/bash", killed, kRepo);
  EXPECT_EQ(crash.exit_code, 128 + SIGXFSZ) << crash.err;
  EXPECT_NE(crash.err.find("was killed by SIGXFSZ"), std::string::npos) << crash.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/.step-00000004.saving.tmp"));
  EXPECT_EQ(executor::latest_checkpoint(dir), dir + "/step-00000002");

  const RunResult again = mfsdp(
      with(with(run_args(plan, shared_config(4)), every_2), {"--resume", "--save-model", resumed}));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/.step-00000004.saving.tmp"));
  const auto want = saved_parameters(straight);
  const auto got = saved_parameters(resumed);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, value] : want) {
    EXPECT_TRUE(torch::equal(got.at(name), value)) << name << " differs after resuming";
  }
}

TEST(RunCli, TwoLaunchersMakeATwoNodeRun) {
  const executor::TrainConfig config = shared_config(2);
  const std::string plan = plan_for(2, "run_two_nodes");
  // The nodes' launchers cannot make up a secret that both know: without one they start nothing.
  unsetenv("MFSDP_RDZV_SECRET");
  std::vector<std::string> fixed_port = run_args(plan, config);
  fixed_port.resize(fixed_port.size() - 4);  // drop --master-port 0 and the timeout
  const RunResult unshared = mfsdp(with(fixed_port, {"--nnodes", "2", "--master-port", "29500"}));
  EXPECT_EQ(unshared.exit_code, 2) << unshared.err;
  EXPECT_NE(unshared.err.find("a run over --nnodes 2 needs a rendezvous secret that every node "
                              "shares: export MFSDP_RDZV_SECRET="),
            std::string::npos)
      << unshared.err;
  setenv("MFSDP_RDZV_SECRET", "the two nodes' shared secret", 1);
  // One thread per rank in all three launches: each launcher shares out only its own node's
  // cores, and losses compare bit for bit only with the same threads.
  const RunResult probe =
      mfsdp(with(run_args(plan, config), {"--nproc-per-node", "2", "--threads", "1"}));
  ASSERT_EQ(probe.exit_code, 0) << probe.err;
  const std::string port = std::to_string(free_port());
  auto node = [&](int rank) {
    std::vector<std::string> args = run_args(plan, config);
    args.resize(args.size() - 4);  // drop --master-port 0 and the timeout
    return mfsdp(
        with(args, {"--nnodes", "2", "--node-rank", std::to_string(rank), "--nproc-per-node", "1",
                    "--master-port", port, "--collective-timeout", "60", "--threads", "1"}));
  };
  auto second = std::async(std::launch::async, node, 1);
  const RunResult first = node(0);
  const RunResult other = second.get();
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  ASSERT_EQ(other.exit_code, 0) << other.out << other.err;
  // Node 0 holds rank 0, which reports; node 1 holds rank 1. Same losses as one launcher.
  const auto last_loss = [](const std::string& out) {
    const auto at = out.find("step 2/2  loss ");
    return at == std::string::npos ? std::string() : out.substr(at, 24);
  };
  EXPECT_NE(last_loss(first.out), "");
  EXPECT_EQ(last_loss(first.out), last_loss(probe.out));
  EXPECT_EQ(other.out.find("[rank 0]"), std::string::npos) << other.out;
}

// One node's launcher is SIGKILLed a few seconds into training (its worker dies with it): the
// other node's rank fails its next collective, and its launcher exits 6 naming the rank,
// well within the collective timeout instead of hanging.
TEST(RunCli, NodeKilledMidRunFailsTheOtherNodeInBoundedTime) {
  setenv("MFSDP_RDZV_SECRET", "the two nodes' shared secret", 1);
  const executor::TrainConfig config = shared_config(2000);
  const std::string plan = plan_for(2, "run_killed_node");
  const std::string port = std::to_string(free_port());
  std::vector<std::string> args = run_args(plan, config);
  args.resize(args.size() - 4);  // drop --master-port 0 and the timeout
  const auto node_args = [&](int rank) {
    return with(args, {"--nnodes", "2", "--node-rank", std::to_string(rank), "--nproc-per-node",
                       "1", "--master-port", port, "--collective-timeout", "20"});
  };
  std::vector<std::string> killed = {"-s", "KILL", "8", MFSDP_BINARY};
  for (const std::string& a : node_args(1)) killed.push_back(a);
  auto second = std::async(std::launch::async,
                           [&] { return run_program("/usr/bin/timeout", killed, kRepo); });
  const auto start = std::chrono::steady_clock::now();
  const RunResult first = mfsdp(node_args(0));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const RunResult other = second.get();
  EXPECT_NE(other.exit_code, 0) << other.err;
  EXPECT_EQ(first.exit_code, 6) << first.out << first.err;
  EXPECT_NE(first.err.find("rank 0 failed first"), std::string::npos) << first.err;
  EXPECT_NE(first.out.find("step"), std::string::npos) << "killed before training started";
  EXPECT_LT(seconds, 8 + 20 + 10) << first.err;
}

// A rank that stops answering but does not die (SIGSTOP, as a hung host or a debugger does):
// the other rank's next collective times out after --collective-timeout and it exits 6; the
// launcher then kills the stopped rank (SIGTERM waits for a stopped process, so SIGKILL after
// --grace) and exits 6 within the timeout and the grace, leaving no process behind. Whichever
// rank stops: rank 0 hosts the rendezvous store, and the other rank's goodbye to it once took
// a second timeout.
void expect_stopped_rank_fails_the_run_in_time(int stopped) {
  const int other = 1 - stopped;
  const std::string name = "run_stopped_" + std::to_string(stopped);
  const std::string plan = plan_for(2, name);
  const std::string metrics = temp_path(name + ".jsonl");
  std::filesystem::remove(metrics);
  std::vector<std::string> args = run_args(plan, shared_config(100000));
  args.resize(args.size() - 2);  // drop the timeout
  constexpr int kTimeout = 8, kGrace = 1;
  const std::vector<std::string> flags =
      with(args, {"--collective-timeout", std::to_string(kTimeout), "--grace",
                  std::to_string(kGrace), "--metrics", metrics});
  // The launcher in the background; once a step is done, stop one of its workers (the launcher
  // starts rank 0 first, so its children are listed in rank order).
  std::vector<std::string> script = {
      "-c",
      "\"$0\" \"$@\" & launcher=$!\n"
      "until [ -s '" +
          metrics +
          "' ]; do sleep 0.1; done\n"
          "worker=$(cut -d' ' -f" +
          std::to_string(stopped + 1) +
          " /proc/$launcher/task/$launcher/children)\n"
          "kill -STOP \"$worker\"\n"
          "start=$(date +%s.%N)\n"
          "wait $launcher; status=$?\n"
          "echo \"launcher exited $status after $(awk \"BEGIN { print $(date +%s.%N) - $start }\") "
          "s\"\n"
          "if kill -0 \"$worker\" 2>/dev/null; then echo 'worker left behind'; fi\n",
      MFSDP_BINARY};
  for (const std::string& a : flags) script.push_back(a);
  const RunResult run = run_program("/bin/bash", script, kRepo);
  const auto at = run.out.find("launcher exited ");
  ASSERT_NE(at, std::string::npos) << run.out << run.err;
  int status = -1;
  double seconds = -1;
  std::sscanf(run.out.c_str() + at, "launcher exited %d after %lf s", &status, &seconds);
  EXPECT_EQ(status, 6) << run.err;
  // The timeout, the grace, and slack for a slow host: far less than a second timeout.
  EXPECT_LT(seconds, kTimeout + kGrace + 4) << run.err;
  EXPECT_GE(seconds, kTimeout) << run.err;
  EXPECT_EQ(run.out.find("worker left behind"), std::string::npos) << run.out;
  const std::string rank = "rank " + std::to_string(other);
  EXPECT_NE(run.err.find("[" + rank + "] mfsdp: error: " + rank + ": "), std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find(rank + " failed first"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("killing it (SIGKILL)"), std::string::npos) << run.err;
}

TEST(RunCli, RankOneStoppedBeyondTheTimeoutFailsTheRunInBoundedTime) {
  expect_stopped_rank_fails_the_run_in_time(1);
}

// Rank 0 also hosts the rendezvous store.
TEST(RunCli, RankZeroStoppedBeyondTheTimeoutFailsTheRunInBoundedTime) {
  expect_stopped_rank_fails_the_run_in_time(0);
}

// A stranger on 127.0.0.1 keeps connecting to the rendezvous port while the ranks start and
// train: speaking c10d's TCPStore protocol (a SET that would overwrite the ranks' join key, as
// overwriting the Gloo addresses once killed every run), or mfsdp's with another secret. The
// store refuses each connection, rank 0 says so, and the run trains as if nobody were there.
TEST(RunCli, AStrangerAtTheRendezvousPortIsRefusedAndTheRunGoesOn) {
  const executor::TrainConfig config = shared_config(3);
  const std::string plan = plan_for(2, "run_stranger");
  const int port = free_port();
  std::atomic<bool> done{false};
  std::atomic<int> refused{0};
  std::thread stranger([&] {
    for (int attempt = 0; !done; ++attempt) {
      if (attempt % 2 == 1) {
        try {
          executor::StoreClient client("127.0.0.1", port, "a stranger's guess at the secret",
                                       std::chrono::milliseconds(200));
          client.set("mfsdp/exchange/mfsdp/join/0/1", "");
        } catch (const executor::StoreError& e) {
          if (std::string(e.what()).find("refused this rank's secret") != std::string::npos) {
            ++refused;
          }
        }
        continue;
      }
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(static_cast<uint16_t>(port));
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
        const std::string set = std::string("\x00\x1c\x00\x00\x00\x00\x00\x00\x00", 9) +
                                "mfsdp/exchange/mfsdp/join/0/1" + std::string(80, '\x01');
        ::send(fd, set.data(), set.size(), MSG_NOSIGNAL);
        char buffer[256];
        while (::recv(fd, buffer, sizeof buffer, 0) > 0) {
        }
      }
      ::close(fd);
      // Nothing listens before rank 0 starts: pace the attempts rather than spin.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::vector<std::string> args = run_args(plan, config);
  args.resize(args.size() - 4);  // drop --master-port 0 and the timeout
  const RunResult run = mfsdp(with(args, {"--nproc-per-node", "2", "--master-port",
                                          std::to_string(port), "--collective-timeout", "60"}));
  done = true;
  stranger.join();
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("step 3/3  loss "), std::string::npos) << run.out;
  EXPECT_GT(refused.load(), 0) << "the stranger never reached the store";
  EXPECT_NE(run.err.find("[rank 0] mfsdp: warning: the rendezvous store on 127.0.0.1:" +
                         std::to_string(port) + " refused a connection from 127.0.0.1:"),
            std::string::npos)
      << run.err;
}

// A two-node run on one host, with more strangers at its rendezvous port than the store has
// places for, saying nothing or trickling a hello, each back as soon as it is dropped: node 1
// starts only once the flood holds every place, as a node started later by a scheduler would.
// Its rank still gets in and the run trains within a timeout shorter than a stranger's hello
// window was (until 0ac1070 every place stayed taken for 10 s at a time, and a flood that
// refilled them kept the late rank out until it timed out).
TEST(RunCli, AFloodOfStrangersAtTheRendezvousPortDoesNotKeepALateNodeOut) {
  const executor::TrainConfig config = shared_config(3);
  const std::string plan = plan_for(2, "run_flood");
  const int port = free_port();
  setenv("MFSDP_RDZV_SECRET", "a flood test's secret, 32 bytes long", 1);
  std::vector<std::string> args = run_args(plan, config);
  args.resize(args.size() - 4);  // drop --master-port 0 and the timeout
  const auto node = [&](int rank) {
    return mfsdp(with(args, {"--nnodes", "2", "--node-rank", std::to_string(rank),
                             "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port",
                             std::to_string(port), "--collective-timeout", "8"}));
  };
  testing::StrangerFlood flood(port, 1200, 100);
  std::future<RunResult> node0 = std::async(std::launch::async, node, 0);
  const bool filled = [&] {
    for (int i = 0; i < 1000 && flood.dropped() < 1200; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return flood.dropped() >= 1200;
  }();
  const RunResult run1 = node(1);
  const RunResult run0 = node0.get();
  flood.stop();
  unsetenv("MFSDP_RDZV_SECRET");
  ASSERT_TRUE(filled) << "the flood never filled the store: " << flood.connected() << " connected; "
                      << run0.err;
  ASSERT_EQ(run0.exit_code, 0) << run0.out << run0.err;
  ASSERT_EQ(run1.exit_code, 0) << run1.out << run1.err;
  EXPECT_NE(run0.out.find("step 3/3  loss "), std::string::npos) << run0.out;
  EXPECT_NE(run0.err.find("[rank 0] mfsdp: warning: the rendezvous store on 127.0.0.1:" +
                          std::to_string(port) + " refused a connection from 127.0.0.1:"),
            std::string::npos)
      << run0.err;
}

TEST(RunCli, TraceShowsEveryRanksComputeAndStreamsWithOverlappingGathers) {
  const std::string plan = plan_for(2, "run_trace");
  const std::string trace = temp_path("run_trace.json");
  const RunResult r = mfsdp(with(run_args(plan, shared_config(4)), {"--trace", trace}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json events = nlohmann::json::parse(read_file(trace)).at("traceEvents");
  std::map<std::pair<int, int>, std::string> track_names;
  for (const auto& e : events) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") {
      track_names[{e.at("pid").get<int>(), e.at("tid").get<int>()}] =
          e.at("args").at("name").get<std::string>();
    }
  }
  // Every span's category is its track, for Perfetto's filters.
  const char* const categories[] = {"compute", "all_gather", "reduce_scatter"};
  for (const auto& e : events) {
    if (e.at("ph") == "X") {
      EXPECT_EQ(e.at("cat"), categories[e.at("tid").get<int>()]) << e;
    }
  }
  for (int rank : {0, 1}) {
    EXPECT_EQ(track_names[std::make_pair(rank, 0)], "compute");
    EXPECT_EQ(track_names[std::make_pair(rank, 1)], "all_gather stream");
    EXPECT_EQ(track_names[std::make_pair(rank, 2)], "reduce_scatter stream");
  }
  // Prefetching: some all-gather runs while compute is inside a unit's forward.
  bool overlap = false;
  for (const auto& gather : events) {
    if (gather.at("ph") != "X" || gather.at("tid") != 1) continue;
    EXPECT_GT(gather.at("args").at("bytes").get<int64_t>(), 0);
    EXPECT_EQ(gather.at("name").get<std::string>().rfind("all-gather of ", 0), 0u) << gather;
    const int64_t g0 = gather.at("ts"), g1 = g0 + gather.at("dur").get<int64_t>();
    for (const auto& fwd : events) {
      if (fwd.at("ph") != "X" || fwd.at("pid") != gather.at("pid") || fwd.at("tid") != 0 ||
          fwd.at("name").get<std::string>().rfind("forward ", 0) != 0) {
        continue;
      }
      const int64_t f0 = fwd.at("ts"), f1 = f0 + fwd.at("dur").get<int64_t>();
      overlap = overlap || (g0 < f1 && f0 < g1);
    }
  }
  EXPECT_TRUE(overlap);
  size_t reduce_scatters = 0;
  // The tied embedding's first use (the LM head) is reduce-scattered early, once per
  // microbatch of each rank, beside the root unit's own reduce-scatter.
  std::map<int, int> early, root;
  for (const auto& e : events) {
    if (e.at("ph") == "X" && e.at("tid") == 2) {
      const std::string name = e.at("name");
      EXPECT_EQ(name.rfind("reduce-scatter of ", 0), 0u) << e;
      ++reduce_scatters;
      if (name == "reduce-scatter of <root> group 0 (early, for tied wte.weight)") {
        ++early[e.at("pid").get<int>()];
      } else if (name == "reduce-scatter of <root> group 0") {
        ++root[e.at("pid").get<int>()];
      }
    }
  }
  EXPECT_GT(reduce_scatters, 0u);
  for (int rank : {0, 1}) {
    EXPECT_GT(root[rank], 0) << "rank " << rank;
    EXPECT_EQ(early[rank], root[rank]) << "rank " << rank;
  }
}

}  // namespace
}  // namespace mfsdp::testing

namespace mfsdp::testing {
namespace {

// mixed.pt keeps a float16 parameter: LibTorch's CPU Adam and AdamW have no float16 step, so
// the run says so before training, and SGD trains it.
TEST(RunCli, Float16ParametersUnderAdamOnTheCpuAreRefusedWithOneLine) {
  const std::string plan = temp_path("mixed.plan.json");
  ASSERT_EQ(
      mfsdp({"plan", "tests/fixtures/mixed.pt", "--world-size", "2", "--auto", "-o", plan, "-q"})
          .exit_code,
      0);
  const std::vector<std::string> run = {"run",       plan, "--data",         "synthetic",
                                        "--seq-len", "7",  "--global-batch", "4",
                                        "--steps",   "2",  "--master-port",  "0"};
  const RunResult adamw = mfsdp(run);
  EXPECT_EQ(adamw.exit_code, 2) << adamw.err;
  EXPECT_NE(adamw.err.find("the plan keeps parameters in float16, and LibTorch's adamw cannot "
                           "update float16 tensors on the CPU"),
            std::string::npos)
      << adamw.err;
  std::vector<std::string> sgd = run;
  sgd.insert(sgd.end(), {"--optimizer", "sgd"});
  const RunResult trained = mfsdp(sgd);
  EXPECT_EQ(trained.exit_code, 0) << trained.err;
}

}  // namespace
}  // namespace mfsdp::testing
