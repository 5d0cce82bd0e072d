// Bad input to `mfsdp run`: each gives a clear error and its documented exit code, and the
// checks the launcher can make itself come before any worker starts (one line, no prefix).
#include <fstream>

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

TEST(RunInput, WorldSizeOtherThanThePlans) {
  expect_refused(run({"--nproc-per-node", "3"}),
                 "is for 2 ranks but --nnodes 1 x --nproc-per-node 3 launches 3");
}

TEST(RunInput, UnknownOptimizer) {
  expect_refused(run({"--optimizer", "lamb"}), "lamb");
}

TEST(RunInput, StepsMustBePositive) {
  const RunResult r = mfsdp({"run", two_rank_plan(), "--steps", "0"});
  expect_refused(r, "--steps must be positive");
}

TEST(RunInput, BatchNotDivisibleByRanksTimesMicrobatches) {
  expect_refused(run({"--global-batch", "6", "--microbatches", "2"}),
                 "global batch 6 is not divisible by ranks x microbatches (2 x 2 = 4)");
}

TEST(RunInput, ResumeNeedsACheckpointDirectory) {
  expect_refused(run({"--resume"}), "--resume needs --checkpoint-dir");
}

// Checked by the ranks (they need the model or the data): every rank fails alike and the
// launcher exits with their code, naming the rank.
void expect_rank_failure(const RunResult& r, int code, const std::string& message) {
  EXPECT_EQ(r.exit_code, code) << r.out << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("failed first"), std::string::npos) << r.err;
}

TEST(RunInput, PlanForAnotherModel) {
  expect_rank_failure(run({"--model", "tests/fixtures/untied_lm.pt"}), 2, "does not match");
}

TEST(RunInput, MissingDataFile) {
  expect_rank_failure(run({"--data", "no/such/corpus.txt", "--seq-len", "8"}), 5,
                      "no/such/corpus.txt");
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

}  // namespace
}  // namespace mfsdp::testing
