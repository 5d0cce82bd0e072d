// `mfsdp probe` as a user runs it: the real binary starting two local ranks, which time the
// executor's collectives over Gloo and write a profile that predict::parse_profile reads back.
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "predict/profile.h"
#include "tests/cli/cli_test_support.h"
#include "tests/predict/profile_expectations.h"

namespace mfsdp::testing {
namespace {

// A free port each time, so that tests running at once do not meet on 29500.
RunResult probe(std::vector<std::string> args) {
  args.insert(args.begin(), {"probe", "--master-port", "0"});
  return mfsdp(args);
}

TEST(ProbeCli, WritesAProfileOfEachCollectiveAtTheLaunchedWorldSize) {
  const std::string path = temp_path("probe.profile.json");
  std::filesystem::remove(path);
  const RunResult r =
      probe({"--nproc-per-node", "2", "--sizes", "4KiB..64KiB", "--repeats", "3", "-o", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const predict::Profile profile = predict::parse_profile(nlohmann::json::parse(read_file(path)));
  EXPECT_EQ(profile.name, "probe");
  EXPECT_EQ(profile.backend, "gloo");
  EXPECT_EQ(profile.device, "cpu");
  ASSERT_TRUE(profile.threads_per_rank.has_value());
  EXPECT_GE(*profile.threads_per_rank, 1);
  expect_probed_collectives_and_compute(profile, 2, {4096, 16384, 65536});
  // The launcher's summary, without the ranks' "[rank 0] " prefix.
  EXPECT_EQ(r.out.find("[rank"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nall_gather "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote " + path + "\n"), std::string::npos) << r.out;
}

// --builtin writes the built-in profile as a file, measuring nothing: read back, it is the
// built-in, and --profile takes it as it takes the name.
TEST(ProbeCli, BuiltinWritesTheBuiltInProfileAsAFile) {
  const std::string path = temp_path("builtin.profile.json");
  std::filesystem::remove(path);
  const RunResult r = mfsdp({"probe", "--builtin", "a100-nvlink", "-o", path, "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const predict::Profile written = predict::parse_profile(nlohmann::json::parse(read_file(path)));
  const predict::Profile builtin = *predict::builtin_profile("a100-nvlink");
  EXPECT_EQ(predict::profile_text(written), predict::profile_text(builtin));
  ASSERT_TRUE(written.compute.rates.has_value());
  EXPECT_EQ(written.compute.rates->tflops.at("bfloat16"), 312);

  const std::string plan = temp_path("builtin_profile.plan.json");
  const RunResult planned = mfsdp({"plan", "examples/bytegpt.pt", "--world-size", "8", "--unit",
                                   "layers.*", "--unit", "<root>", "--trace-input", "8x64:int64",
                                   "--trace-device", "meta", "--profile", path, "-o", plan, "-q"});
  ASSERT_EQ(planned.exit_code, 0) << planned.err;

  const RunResult unknown = mfsdp({"probe", "--builtin", "tpu-v9", "-o", path});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(lines(unknown.err), 1u) << unknown.err;
  EXPECT_NE(unknown.err.find("--builtin 'tpu-v9': not a built-in profile; they are a100-nvlink"),
            std::string::npos)
      << unknown.err;
  const RunResult mixed =
      mfsdp({"probe", "--builtin", "a100-nvlink", "--repeats", "3", "-o", path});
  EXPECT_EQ(mixed.exit_code, 2);
  EXPECT_NE(mixed.err.find("--repeats is for measuring"), std::string::npos) << mixed.err;
}

TEST(ProbeCli, RejectsSizesThatGiveOnePointWithOneLineAndNoFile) {
  const std::string path = temp_path("probe.bad-sizes.json");
  std::filesystem::remove(path);
  for (const std::string sizes : {"4KiB", "64KiB..4KiB", "4KB..lots"}) {
    const RunResult r = probe({"--nproc-per-node", "2", "--sizes", sizes, "-o", path});
    EXPECT_EQ(r.exit_code, 2) << sizes << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("--sizes '" + sizes + "'"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path)) << sizes;
  }
}

// Exit 5, as for mfsdp run's outputs: the profile could not be written (docs/cli.md).
TEST(ProbeCli, RejectsAnOutputInAMissingDirectoryBeforeStartingRanks) {
  const std::string path = temp_path("no-such-directory/profile.json");
  const RunResult r = probe({"--nproc-per-node", "2", "-o", path});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("-o " + path + ": the directory"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("[rank"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ProbeCli, RefusesOneRankWithOneLine) {
  const std::string path = temp_path("probe.refused.json");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--nproc-per-node", "1", "-o", path},
        std::vector<std::string>{"--repeats", "0", "-o", path}}) {
    const RunResult r = probe(args);
    EXPECT_EQ(r.exit_code, 2) << args[1] << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path));
  }
}

// One rank on a GPU cannot time NCCL collectives, and NCCL cannot put two on one GPU: exit 2,
// saying what to do with one GPU, wherever this runs.
TEST(ProbeCli, RefusesOneGpuRankSayingWhatToDoWithOneGpu) {
  const std::string path = temp_path("probe.one-gpu.json");
  const RunResult r = probe({"--device", "cuda", "--nproc-per-node", "1", "-o", path});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("NCCL cannot put two ranks on one GPU"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("with one GPU, predict with a built-in profile and --compute-scale"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(path));
}

// --device cuda where a rank cannot use a GPU of its own (here: a CPU-only LibTorch, a build
// without the CUDA backend, no GPU, or one GPU for two ranks): exit 6 with the reason, asked
// by the launcher before any rank starts, as mfsdp run asks.
TEST(ProbeCli, CudaWhereARankCannotUseAGpuFailsWithOneLineBeforeStartingRanks) {
  const std::string path = temp_path("probe.no-gpu.json");
  std::filesystem::remove(path);
  const RunResult r =
      probe({"--device", "cuda", "--sizes", "4KiB..64KiB", "--repeats", "3", "-o", path});
  if (r.exit_code == 0) GTEST_SKIP() << "every rank here can probe on a GPU";
  EXPECT_EQ(r.exit_code, 6) << r.out << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.find("[rank"), std::string::npos) << r.err;
  const bool no_gpu = r.err.find("rank 0 cannot probe on a GPU: ") != std::string::npos &&
                      r.err.find(", or probe with --device cpu\n") != std::string::npos;
  const bool one_gpu =
      r.err.find("this node has one GPU, and NCCL needs one per rank") != std::string::npos;
  EXPECT_TRUE(no_gpu || one_gpu) << r.err;
  EXPECT_EQ(r.err.find("not yet"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace mfsdp::testing
