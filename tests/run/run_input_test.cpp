// Bad input to `mfsdp run`: each gives a clear error and its documented exit code, and the
// checks the launcher can make itself come before any worker starts (one line, no prefix).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_support.h"

namespace mfsdp::testing {
namespace {

const std::string& two_rank_plan() {
  static const std::string path = [] {
    const std::string p = temp_path("run_input.plan.json");
    const RunResult r = mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit",
                               "layers.*", "--unit", "<root>", "-o", p, "-q"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return p;
  }();
  return path;
}

RunResult run(std::vector<std::string> extra) {
  std::vector<std::string> args = {"run",
                                   two_rank_plan(),
                                   "--steps",
                                   "2",
                                   "--global-batch",
                                   "4",
                                   "--input-shape",
                                   "8",
                                   "--master-port",
                                   "0",
                                   "--collective-timeout",
                                   "30"};
  args.insert(args.end(), extra.begin(), extra.end());
  return mfsdp(args);
}

// Refused by the launcher: exactly one line, nothing from any rank.
void expect_refused(const RunResult& r, const std::string& message) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("[rank"), std::string::npos) << r.err;
}

TEST(RunInput, MissingModelFileSaysWhereItsPathCameFrom) {
  // The plan names a model that is not beside it.
  std::ifstream in(two_rank_plan());
  nlohmann::json plan = nlohmann::json::parse(in);
  plan["model"]["path"] = "no/such/model.pt";
  const std::string path = temp_path("moved_model.plan.json");
  std::ofstream(path) << plan.dump(2);
  const RunResult r = mfsdp({"run", path, "--nproc-per-node", "2", "--steps", "1"});
  expect_refused(r, "no/such/model.pt: no such model file; " + path +
                        " names it as no/such/model.pt, relative to the plan file's directory");
  EXPECT_NE(r.err.find("or pass --model PATH"), std::string::npos) << r.err;
  expect_refused(run({"--model", "no/such.pt"}), "no/such.pt: no such model file (--model)");
}

// A plan records its model relative to itself: made in one directory, moved with its model
// and run from another, it still finds the model.
TEST(RunInput, FindsTheModelBesideThePlanFromAnyDirectory) {
  namespace fs = std::filesystem;
  const fs::path made = temp_path("plan_and_model"), moved = temp_path("plan_and_model_moved");
  fs::remove_all(made);
  fs::remove_all(moved);
  fs::create_directories(made / "models");
  fs::create_directories(made / "plans");
  fs::copy_file(kRepo + "/tests/fixtures/tied_lm.pt", made / "models" / "tied_lm.pt");
  const RunResult planned =
      run_program(MFSDP_BINARY,
                  {"plan", "models/tied_lm.pt", "--world-size", "2", "--unit", "layers.*", "--unit",
                   "<root>", "-o", "plans/tied.plan.json", "-q"},
                  made.string());
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  std::ifstream in(made / "plans" / "tied.plan.json");
  EXPECT_EQ(nlohmann::json::parse(in)["model"]["path"], "../models/tied_lm.pt");
  fs::rename(made, moved);
  const RunResult r = mfsdp({"run", (moved / "plans" / "tied.plan.json").string(), "--steps", "1",
                             "--global-batch", "4", "--input-shape", "8", "--master-port", "0"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
}

// A plan made before that rule named the model from where `mfsdp plan` ran: run from there,
// it still works, with a warning that says why and how to silence it.
TEST(RunInput, OldPlansModelFromTheCurrentDirectoryRunsWithAWarning) {
  std::ifstream in(two_rank_plan());
  nlohmann::json plan = nlohmann::json::parse(in);
  plan["model"]["path"] = "tests/fixtures/tied_lm.pt";  // as typed in the repository root
  const std::string path = temp_path("old_style.plan.json");
  std::ofstream(path) << plan.dump(2);
  const RunResult r = mfsdp({"run", path, "--steps", "1", "--global-batch", "4", "--input-shape",
                             "8", "--master-port", "0"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("mfsdp: warning: " + path +
                       " names model tests/fixtures/tied_lm.pt, which is not beside the plan"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("re-plan, or pass --model"), std::string::npos) << r.err;
}

// A checkpoint directory that cannot be written is found before training, not at the first
// save after it.
TEST(RunInput, ACheckpointDirectoryThatCannotBeWrittenIsRefusedBeforeAnyWorkerStarts) {
  const std::string file = temp_path("run_input_ckpt_file");
  std::ofstream(file) << "not a directory";
  RunResult r = run({"--checkpoint-dir", file + "/ckpt"});
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("--checkpoint-dir " + file + "/ckpt: " + file +
                       " is a file, not a directory; choose another directory"),
            std::string::npos)
      << r.err;
  if (::geteuid() == 0) GTEST_SKIP() << "root may write into a read-only directory";
  const std::string read_only = temp_path("run_input_ckpt_read_only");
  std::filesystem::create_directories(read_only);
  std::filesystem::permissions(
      read_only, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  r = run({"--checkpoint-dir", read_only + "/new/ckpt"});
  std::filesystem::permissions(read_only, std::filesystem::perms::owner_all);
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
  EXPECT_NE(r.err.find("--checkpoint-dir " + read_only + "/new/ckpt: cannot write into " +
                       read_only + " (Permission denied)"),
            std::string::npos)
      << r.err;
}

// A typo in an output's directory is found before training, not after it.
TEST(RunInput, OutputsInAMissingDirectoryAreRefusedBeforeAnyWorkerStarts) {
  for (const char* flag : {"--save-model", "--metrics", "--trace"}) {
    SCOPED_TRACE(flag);
    const RunResult r = run({flag, "/no/such/dir/out"});
    EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(std::string(flag) +
                         " /no/such/dir/out: the directory /no/such/dir does not exist; create "
                         "it first"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("[rank"), std::string::npos) << r.err;
  }
}

TEST(RunInput, CollectiveTimeoutMustFitInMilliseconds) {
  for (const char* seconds : {"0", "-1", "1e30", "inf", "nan", "-nan"}) {
    expect_refused(run({"--collective-timeout", seconds}),
                   "--collective-timeout must be a positive number of seconds, at most 2592000 "
                   "(30 days); got ");
  }
}

// The same check and message as every duration flag (it overflowed to a negative count).
TEST(RunInput, GraceMustFitInMilliseconds) {
  for (const char* seconds : {"-1", "1e30", "inf", "nan", "-nan", "2592001"}) {
    SCOPED_TRACE(seconds);
    expect_refused(run({"--grace", seconds}),
                   "--grace must be 0 or a positive number of seconds, at most 2592000 (30 days); "
                   "got ");
  }
  const RunResult r = run({"--grace", "nan"});
  EXPECT_NE(r.err.find("got nan"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("-9223372036854775808"), std::string::npos) << r.err;
}

TEST(RunInput, MissingPlan) {
  const RunResult r = mfsdp({"run", "no/such.plan.json", "--steps", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("no/such.plan.json"), std::string::npos) << r.err;
}

TEST(RunInput, CorruptPlan) {
  const std::string path = temp_path("corrupt.plan.json");
  std::ofstream(path) << "{\"schema\": \"mfsdp.plan/1\", \"units\": [";
  const RunResult r = mfsdp({"run", path, "--steps", "1"});
  expect_refused(r, path + ": not valid JSON");
}

// A model, or any file that is not JSON, where a plan belongs.
TEST(RunInput, AModelWhereThePlanBelongsIsToldToPlanItFirst) {
  for (const char* command : {"run", "show", "validate"}) {
    SCOPED_TRACE(command);
    const RunResult r = mfsdp({command, "examples/bytegpt.pt"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("examples/bytegpt.pt is a model (a zip archive, as TorchScript saves), "
                         "not a plan; plan it first: mfsdp plan examples/bytegpt.pt"),
              std::string::npos)
        << r.err;
  }
  const RunResult text = mfsdp({"show", "examples/tiny_corpus.txt"});
  EXPECT_EQ(text.exit_code, 2);
  EXPECT_NE(text.err.find("not valid JSON: syntax error"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("; a plan is the JSON file that mfsdp plan writes"), std::string::npos)
      << text.err;
}

// Data mistakes are the launcher's to report, once, before any worker starts.
TEST(RunInput, DataMistakesAreRefusedBeforeAnyWorkerStarts) {
  expect_refused(run({"--data", "examples/tiny_corpus.txt"}),
                 "text data needs --seq-len, the tokens per sample (got 0)");
  expect_refused(run({"--data", "examples/tiny_corpus.txt", "--data-kind", "tensors"}),
                 "examples/tiny_corpus.txt: not a file written by torch.save (a zip archive)");
  expect_refused(run({"--data", "examples/tiny_corpus.txt", "--data-kind", "bogus"}),
                 "unknown data kind 'bogus'");
  // A typo in the name (an extension mfsdp does not know) is a missing file, not a kind.
  for (const char* path : {"examples/tiny_corpus.tx", "examples/no_such.txt"}) {
    SCOPED_TRACE(path);
    const RunResult r = run({"--data", path, "--seq-len", "8"});
    EXPECT_EQ(r.exit_code, 5) << r.err;
    EXPECT_EQ(r.err, "mfsdp: error: cannot read data file " + std::string(path) +
                         ": No such file or directory; check the --data path\n");
  }
}

TEST(RunInput, AWarmupLongerThanTheRunIsWarnedAboutOnce) {
  const RunResult r = run({"--warmup", "30", "--steps", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string warning =
      "mfsdp: warning: --warmup 30 is longer than --steps 2: the learning rate never reaches --lr";
  const size_t at = r.err.find(warning);
  EXPECT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(warning, at + 1), std::string::npos) << r.err;
  EXPECT_EQ(run({"--warmup", "2", "--steps", "2"}).err.find("--warmup"), std::string::npos);
}

TEST(RunInput, WorldSizeOtherThanThePlans) {
  expect_refused(run({"--nproc-per-node", "3"}),
                 "is for 2 ranks but --nnodes 1 x --nproc-per-node 3 launches 3");
}

TEST(RunInput, UnknownOptimizer) {
  expect_refused(run({"--optimizer", "lamb"}), "lamb");
}

TEST(RunInput, UnknownDevice) {
  expect_refused(run({"--device", "tpu"}), "--device: tpu not in {auto,cuda,cpu}");
}

// --device cuda where a rank cannot use a GPU (here: a CPU-only LibTorch, no GPU, or fewer
// GPUs than ranks): every rank fails with the reason, exit 6.
TEST(RunInput, CudaWhereARankCannotUseAGpuFailsWithTheReason) {
  const RunResult r = run({"--device", "cuda"});
  if (r.exit_code == 0) GTEST_SKIP() << "every rank here can train on a GPU";
  EXPECT_EQ(r.exit_code, 6) << r.out << r.err;
  EXPECT_NE(r.err.find("cannot train on a GPU: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(", or train with --device cpu"), std::string::npos) << r.err;
  // Asked by the launcher before any worker started: one line, from no rank.
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.find("[rank"), std::string::npos) << r.err;
}

TEST(RunInput, NnodesMustBeAtLeastOne) {
  expect_refused(run({"--nnodes", "0"}), "--nnodes 0 is invalid; it must be from 1 to 2147483647");
}

TEST(RunInput, NprocPerNodeMustBeAtLeastOne) {
  for (const std::string n : {"0", "-1"}) {
    expect_refused(run({"--nproc-per-node", n}),
                   "--nproc-per-node " + n +
                       " is invalid; it must be from 1 to 2147483647 (or left out: the plan's "
                       "world size / --nnodes)");
  }
}

// Whole numbers are read as typed: CLI11 clamped a value beyond 64 bits to the largest int64
// and took "1.5" for some flags. Each bad value is one line naming the flag, the value and the
// range, before any worker starts.
TEST(RunInput, WholeNumberFlagsRefuseValuesOutsideTheirRange) {
  const std::string steps = "it must be from 1 to 9223372036854775807";
  expect_refused(run({"--steps", "99999999999999999999"}),
                 "mfsdp: error: --steps 99999999999999999999 is invalid; " + steps + "\n");
  expect_refused(run({"--steps", "-1"}), "--steps -1 is invalid; " + steps);
  expect_refused(run({"--steps", "1.5"}), "--steps '1.5' is not a whole number; " + steps);
  expect_refused(run({"--steps", "abc"}), "--steps 'abc' is not a whole number; " + steps);
  const std::string port = "it must be from 1 to 65535, or 0 to pick a free port";
  expect_refused(run({"--master-port", "99999999999999999999"}),
                 "--master-port 99999999999999999999 is invalid; " + port);
  expect_refused(run({"--master-port", "65536"}), "--master-port 65536 is invalid; " + port);
  expect_refused(run({"--master-port", "-1"}), "--master-port -1 is invalid; " + port);
  expect_refused(run({"--master-port", "1.5"}),
                 "--master-port '1.5' is not a whole number; " + port);
  expect_refused(run({"--seed", "18446744073709551616"}),
                 "--seed 18446744073709551616 is invalid; it must be from 0 to "
                 "9223372036854775807");
  expect_refused(run({"--seed", "-1"}),
                 "--seed -1 is invalid; it must be from 0 to 9223372036854775807");
  expect_refused(run({"--global-batch", "abc"}),
                 "--global-batch 'abc' is not a whole number; it must be from 1 to "
                 "9223372036854775807");
  expect_refused(run({"--keep-checkpoints", "2147483648"}),
                 "--keep-checkpoints 2147483648 is invalid; it must be 0 (keep all) or more, up "
                 "to 2147483647");
  expect_refused(run({"--node-rank", "-1"}),
                 "--node-rank -1 is invalid; it must be from 0 to --nnodes - 1");
  expect_refused(run({"--seq-len", "2147483648"}),
                 "--seq-len 2147483648 is invalid; it must be from 1 to 2147483647");
  expect_refused(run({"--trace-steps", "0"}),
                 "--trace-steps 0 is invalid; it must be from 1 to 2147483647");
  expect_refused(run({"--log-every", "0"}),
                 "--log-every 0 is invalid; it must be from 1 to 9223372036854775807");
}

// The last value of a flag given twice counts, and a valid value still trains.
TEST(RunInput, WholeNumberFlagsTakeValidValues) {
  const RunResult r = run({"--steps", "99999999999999999999", "--steps", "1", "--seed", "3",
                           "--log-every", "1", "--trace-steps", "1", "--keep-checkpoints", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("step 1/1"), std::string::npos) << r.out << r.err;
}

TEST(RunInput, EmptyMasterAddr) {
  expect_refused(run({"--master-addr", ""}), "--master-addr is empty");
}

// tied_lm planned with --trace-input `spec`, then one step of synthetic data without
// --input-shape, which takes its shape from the traced input.
RunResult run_with_traced_input(const std::string& spec, const std::string& name) {
  const std::string plan = temp_path(name + ".plan.json");
  const RunResult planned =
      mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "layers.*",
             "--unit", "<root>", "--trace-input", spec, "-o", plan, "-q"});
  EXPECT_EQ(planned.exit_code, 0) << planned.err;
  return mfsdp({"run", plan, "--steps", "1", "--global-batch", "4", "--master-port", "0",
                "--collective-timeout", "30"});
}

// Shapes are written 3x32x32 or 3,32,32 alike, in --input-shape and in the plan's
// --trace-input that synthetic data falls back to.
TEST(RunInput, ShapesTakeCommasAsWellAsXs) {
  const RunResult r = run_with_traced_input("2,8:int64", "run_input_comma");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("synthetic int64 [8]"), std::string::npos) << r.out << r.err;
  expect_refused(run({"--input-shape", "8,0"}),
                 "--input-shape '8,0' is not a shape; write one sample's sizes like 64, 3x32x32 "
                 "or 3,32,32");
}

// The threads each worker gets by default: the user's OMP_NUM_THREADS, else this machine's
// cores shared out among the 2 workers.
int default_threads() {
  const char* user = std::getenv("OMP_NUM_THREADS");
  if (user != nullptr && *user != '\0') return std::atoi(user);
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  return std::max(1, CPU_COUNT(&set) / 2);
}

// The first line names the device (cpu when asked, and what auto chose, with its reason when
// that is the CPU) and each rank's threads: --threads, or the default.
TEST(RunInput, FirstLineSaysWhereRanksTrainAndOnHowManyThreads) {
  const RunResult cpu = run({"--device", "cpu", "--threads", "3"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.out << cpu.err;
  EXPECT_NE(cpu.out.find("[rank 0] mfsdp run: 2 rank(s) on cpu, 3 threads per rank, "),
            std::string::npos)
      << cpu.out;
  const RunResult automatic = run({});
  ASSERT_EQ(automatic.exit_code, 0) << automatic.out << automatic.err;
  const bool on_gpu = automatic.out.find("2 rank(s) on cuda:") != std::string::npos;
  EXPECT_TRUE(on_gpu || automatic.out.find("2 rank(s) on cpu (auto: rank ") != std::string::npos)
      << automatic.out;
  const int threads = default_threads();
  if (!on_gpu) {
    EXPECT_NE(automatic.out.find("), " + std::to_string(threads) +
                                 (threads == 1 ? " thread" : " threads") + " per rank, "),
              std::string::npos)
        << automatic.out;
  }
  expect_refused(run({"--threads", "0"}), "--threads 0 is invalid; it must be from 1 to 65536");
}

TEST(RunInput, StepsMustBePositive) {
  const RunResult r = mfsdp({"run", two_rank_plan(), "--steps", "0"});
  expect_refused(r, "--steps 0 is invalid; it must be from 1 to 9223372036854775807");
}

TEST(RunInput, BatchNotDivisibleByRanksTimesMicrobatches) {
  expect_refused(run({"--global-batch", "6", "--microbatches", "2"}),
                 "global batch 6 is not divisible by ranks x microbatches (2 x 2 = 4)");
}

// Caught before step 1, not at the first save.
TEST(RunInput, NegativeKeepCheckpoints) {
  expect_refused(run({"--keep-checkpoints", "-1"}),
                 "--keep-checkpoints -1 is invalid; it must be 0 (keep all) or more, up to "
                 "2147483647");
}

TEST(RunInput, ResumeNeedsACheckpointDirectory) {
  expect_refused(run({"--resume"}), "--resume needs --checkpoint-dir");
}

// Checked by the ranks (they need the model or the data): every rank fails alike and the
// launcher exits with their code, naming the rank, and shows the error once.
void expect_rank_failure(const RunResult& r, int code, const std::string& message) {
  EXPECT_EQ(r.exit_code, code) << r.out << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("failed first"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(message), r.err.rfind(message)) << "shown more than once:\n" << r.err;
}

TEST(RunInput, PlanForAnotherModel) {
  expect_rank_failure(run({"--model", "tests/fixtures/untied_lm.pt"}), 2, "does not match");
}

TEST(RunInput, MissingDataFileIsRefusedByTheLauncher) {
  const RunResult r = run({"--data", "no/such/corpus.txt", "--seq-len", "8"});
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
  EXPECT_EQ(r.err,
            "mfsdp: error: cannot read data file no/such/corpus.txt: No such file or directory; "
            "check the --data path\n");
}

TEST(RunInput, DataTooShortForOneSample) {
  const std::string path = temp_path("short.txt");
  std::ofstream(path) << "tiny";
  expect_rank_failure(run({"--data", path, "--seq-len", "16"}), 2, path);
}

TEST(RunInput, TokenIdsBeyondTheVocabulary) {
  const std::string path = temp_path("big_ids.bin");
  std::ofstream out(path, std::ios::binary);
  for (uint16_t id = 0; id < 64; ++id) {
    const uint16_t value = id == 40 ? 300 : id;  // tied_lm has 256 token embeddings
    out.write(reinterpret_cast<const char*>(&value), sizeof value);
  }
  out.close();
  expect_rank_failure(run({"--data", path, "--seq-len", "8"}), 2, "300");
}

// The model meets the data in the first batch: what the interpreter refuses there is the
// data or the flags against the model, a usage error of one line per rank that names the
// reason, the model's line and limit, and the batch; --verbose adds the traceback.
TEST(RunInput, SequenceLongerThanThePositionTableIsAUsageError) {
  const std::vector<std::string> args = {"--data", kRepo + "/examples/tiny_corpus.txt", "--seq-len",
                                         "100"};
  const RunResult r = run(args);
  expect_rank_failure(r, 2,
                      "mfsdp: error: the model failed on the first batch: index out of range in "
                      "self, at `x = self.wte(idx) + self.wpe(pos)` (the model's embeddings: wte "
                      "256 rows, wpe 64 rows); the batch is int64 [2, 100]");
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Traceback"), std::string::npos) << r.err;
  std::vector<std::string> verbose = args;
  verbose.push_back("--verbose");
  const RunResult v = run(verbose);
  EXPECT_EQ(v.exit_code, 2) << v.err;
  EXPECT_NE(v.err.find("Traceback of TorchScript"), std::string::npos) << v.err;
}

TEST(RunInput, ModelLossOnAOneArgumentForwardIsAUsageError) {
  expect_rank_failure(run({"--loss", "model"}), 2,
                      "the model failed on the first batch: Expected at most 2 argument(s) for "
                      "operator 'forward', but received 3");
}

// A plan's training section stands in for flags that are not given; flags win.
TEST(RunInput, PlanTrainingSectionGivesDefaultsAndFlagsWin) {
  const std::string training = temp_path("run_training.json");
  std::ofstream(training) << R"({"steps": 2, "global_batch": 4, "optimizer": "sgd", "lr": 0.05})";
  const std::string plan = temp_path("run_training.plan.json");
  const RunResult planned =
      mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "layers.*",
             "--unit", "<root>", "--training", training, "-o", plan, "-q"});
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const std::vector<std::string> base = {"run",           plan, "--input-shape",        "8",
                                         "--master-port", "0",  "--collective-timeout", "30",
                                         "--log-every",   "1"};
  const RunResult from_plan = mfsdp(base);
  ASSERT_EQ(from_plan.exit_code, 0) << from_plan.out << from_plan.err;
  const std::string out = from_plan.out + from_plan.err;
  EXPECT_NE(out.find("step 2/2"), std::string::npos) << out;
  EXPECT_NE(out.find("global batch 4 ="), std::string::npos) << out;
  EXPECT_NE(out.find("lr 5.00e-02"), std::string::npos) << out;

  std::vector<std::string> with_flags = base;
  with_flags.insert(with_flags.end(), {"--steps", "1", "--lr", "0.01"});
  const RunResult flagged = mfsdp(with_flags);
  ASSERT_EQ(flagged.exit_code, 0) << flagged.out << flagged.err;
  const std::string out2 = flagged.out + flagged.err;
  EXPECT_NE(out2.find("step 1/1"), std::string::npos) << out2;
  EXPECT_NE(out2.find("lr 1.00e-02"), std::string::npos) << out2;
  EXPECT_NE(out2.find("global batch 4 ="), std::string::npos) << out2;
}

TEST(RunInput, StepsAreRequiredWithoutATrainingSection) {
  const RunResult r = mfsdp({"run", two_rank_plan(), "--input-shape", "8"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--steps is required (the plan has no training.steps)"), std::string::npos)
      << r.err;
}

// Synthetic data takes its shape from the plan's traced input when no --input-shape is given.
TEST(RunInput, SyntheticDataIsShapedLikeThePlansTracedInput) {
  const RunResult r = run_with_traced_input("2x8:int64", "run_traced");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("synthetic int64 [8]"), std::string::npos) << r.out << r.err;
}

}  // namespace
}  // namespace mfsdp::testing
