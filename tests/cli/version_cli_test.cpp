// `mfsdp --version` as a user runs it (docs/cli.md#version): the Debian-style build version
// against the project version in CMakeLists.txt and the commit git reports, the LibTorch line,
// and the CUDA backend line against how this build was configured.
#include <filesystem>
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_support.h"

namespace mfsdp::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The `project(mfsdp VERSION x.y.z ...)` line of the top CMakeLists.txt.
std::string project_version() {
  static const std::regex project("project\\(mfsdp VERSION ([0-9.]+)");
  std::smatch m;
  const std::string cmake = read_file(kRepo + "/CMakeLists.txt");
  return std::regex_search(cmake, m, project) ? m[1].str() : "";
}

std::string git(const std::string& args) {
  const RunResult r =
      run_program("/bin/sh", {"-c", "TZ=UTC git -C '" + kRepo + "' " + args + " 2>/dev/null"});
  return r.exit_code == 0 && !r.out.empty() ? r.out.substr(0, r.out.find('\n')) : "";
}

TEST(VersionCli, NamesTheProjectVersionTheCommitLibTorchAndTheCudaBackend) {
  const RunResult r = mfsdp({"--version"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;

  static const std::regex first(
      "mfsdp ([0-9]+\\.[0-9]+\\.[0-9]+)(\\+git([0-9]{8})\\.([0-9a-f]+))?");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(lines[0], m, first)) << lines[0];
  EXPECT_EQ(m[1].str(), project_version());
  if (fs::exists(kRepo + "/.git") && !git("rev-parse HEAD").empty()) {
    ASSERT_TRUE(m[2].matched) << "a git checkout's build names its commit: " << lines[0];
    const std::string hash = m[4].str();
    // The build's commit (HEAD when it was built): its date is the one in the version.
    EXPECT_EQ(git("show -s --format=%cd --date=format-local:%Y%m%d " + hash + "^{commit}"),
              m[3].str())
        << hash << " is not a commit of this repository, or its date differs";
  }

  EXPECT_TRUE(std::regex_match(
      lines[1], std::regex("built with LibTorch [0-9]+\\.[0-9]+[^,]*, Gloo [0-9.]+")))
      << lines[1];
#if MFSDP_EXPECT_CUDA_BACKEND
  EXPECT_EQ(lines[2].rfind("CUDA backend: on (CUDA ", 0), 0u) << lines[2];
  EXPECT_NE(lines[2].find(", NCCL "), std::string::npos) << lines[2];
#else
  EXPECT_EQ(lines[2].rfind("CUDA backend: off (", 0), 0u) << lines[2];
#endif

  // mfsdp-torch, which `mfsdp plan` and `run` exec, says the same.
  const RunResult torch = run_program(
      (fs::path(MFSDP_BINARY).parent_path() / "mfsdp-torch").string(), {"--version"}, kRepo);
  EXPECT_EQ(torch.exit_code, 0) << torch.err;
  EXPECT_EQ(torch.out, r.out);
}

TEST(VersionCli, PlansRecordTheProjectVersionNotTheCommit) {
  const std::string out = temp_path("version_generator.plan.json");
  const RunResult r = mfsdp({"plan", "examples/bytegpt.pt", "--world-size", "2", "--unit",
                             "layers.*", "--unit", "<root>", "-o", out, "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto plan = nlohmann::json::parse(read_file(out));
  EXPECT_EQ(plan.at("generator"), "mfsdp " + project_version());
}

}  // namespace
}  // namespace mfsdp::testing
