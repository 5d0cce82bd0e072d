#include "planner/scope_file.h"

#include <fstream>

#include <gtest/gtest.h>

#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ScopeFile, ReadsMeshPolicyAndOrderedCalls) {
  const std::string path = write_temp("scope_ok.json", R"({
    "mesh": {"world_size": 8, "replicate_size": 2},
    "policy": {"param_dtype": "bfloat16", "forward_prefetch": 2, "unified_stream": true},
    "fully_shard": ["layers.*", {"type": "Block"}, {"module": "<root>"}]
  })");
  const ScopeFile scope = read_scope_file(path);
  EXPECT_EQ(scope.world_size, 8);
  EXPECT_EQ(scope.replicate_size, 2);
  EXPECT_EQ(scope.policy.param_dtype, std::optional<std::string>("bfloat16"));
  EXPECT_EQ(scope.policy.forward_prefetch, 2);
  EXPECT_EQ(scope.policy.backward_prefetch, 1);
  EXPECT_TRUE(scope.policy.unified_stream);
  ASSERT_EQ(scope.units.size(), 3u);
  EXPECT_EQ(scope.units[1].kind, UnitSelector::Kind::kType);
  EXPECT_EQ(scope.units[1].pattern, "Block");
  EXPECT_EQ(scope.units[2].pattern, "<root>");
}

TEST(ScopeFile, RejectsUnknownFieldWithItsPath) {
  const std::string path =
      write_temp("scope_typo.json", R"({"policy": {"prefetch": 2}, "fully_shard": ["a"]})");
  EXPECT_MFSDP_ERROR(read_scope_file(path), ExitCode::kUsage, "policy.prefetch: unknown field");
}

TEST(ScopeFile, RejectsWrongTypes) {
  const std::string path =
      write_temp("scope_type.json", R"({"mesh": {"world_size": "8"}, "fully_shard": ["a"]})");
  EXPECT_MFSDP_ERROR(read_scope_file(path), ExitCode::kUsage,
                     "mesh.world_size: expected an integer");
}

TEST(ScopeFile, RejectsIntegersBeyond64BitsInsteadOfWrappingThem) {
  // 2^64 - 1 would read back as -1, and 2^63 as the most negative integer.
  const std::string path = write_temp(
      "scope_huge.json", R"({"mesh": {"world_size": 18446744073709551615}, "fully_shard": ["a"]})");
  EXPECT_MFSDP_ERROR(read_scope_file(path), ExitCode::kUsage,
                     path +
                         ": mesh.world_size: 18446744073709551615 is out of range; the largest "
                         "integer here is 9223372036854775807");
  const std::string align =
      write_temp("scope_huge_align.json",
                 R"({"policy": {"align_bytes": 9223372036854775808}, "fully_shard": ["a"]})");
  EXPECT_MFSDP_ERROR(read_scope_file(align), ExitCode::kUsage,
                     "policy.align_bytes: 9223372036854775808 is out of range");
}

TEST(ScopeFile, RejectsANulByteAndGarbageAfterTheDocument) {
  const std::string path = ::testing::TempDir() + "/scope_nul.json";
  std::ofstream(path, std::ios::binary) << std::string("{\"fully_shard\": [\"a\"]}\n\0garbage", 31);
  EXPECT_MFSDP_ERROR(read_scope_file(path), ExitCode::kUsage,
                     path +
                         ": not valid JSON: trailing content after the JSON document: a NUL "
                         "byte at byte offset 23 (line 2 column 1)");
}

TEST(ScopeFile, RequiresFullyShardList) {
  const std::string path = write_temp("scope_empty.json", R"({"fully_shard": []})");
  EXPECT_MFSDP_ERROR(read_scope_file(path), ExitCode::kUsage, "fully_shard: expected a non-empty");
}

TEST(ScopeFile, RejectsNonJsonAndMissingFile) {
  EXPECT_MFSDP_ERROR(read_scope_file(write_temp("scope_bad.json", "{oops")), ExitCode::kUsage,
                     "not valid JSON");
  EXPECT_MFSDP_ERROR(read_scope_file("/nonexistent/scope.json"), ExitCode::kUsage,
                     "cannot open the scope file");
}

}  // namespace
}  // namespace mfsdp::planner
