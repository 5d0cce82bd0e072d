// `mfsdp diff` as a user runs it, on pairs of plans the real `mfsdp plan` writes for the test
// fixtures with different flags.
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_support.h"

namespace mfsdp::testing {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// tied_lm (units <root>, layers.0, layers.1; wte's weight is tied to lm_head's) planned with
// one flag changed at a time, written once for all tests.
const std::map<std::string, std::vector<std::string>>& variants() {
  static const std::map<std::string, std::vector<std::string>> flags = {
      {"base", {"--world-size", "2", "--unit", "layers.*", "--unit", "<root>"}},
      {"hoisted",
       {"--world-size", "2", "--unit", "wte", "--unit", "lm_head", "--unit", "layers.*", "--unit",
        "<root>"}},
      {"world4", {"--world-size", "4", "--unit", "layers.*", "--unit", "<root>"}},
      {"prefetch2",
       {"--world-size", "2", "--unit", "layers.*", "--unit", "<root>", "--prefetch", "2"}},
      {"layer1_in_root", {"--world-size", "2", "--unit", "layers.0", "--unit", "<root>"}},
      // The ModuleList is never called: its blocks' parameters are hoisted into <root>.
      {"module_list", {"--world-size", "2", "--unit", "layers", "--unit", "<root>"}},
  };
  return flags;
}

std::string plan_of(const std::string& variant) {
  static std::map<std::string, std::string> written;
  const auto it = written.find(variant);
  if (it != written.end()) return it->second;
  const std::string out = temp_path("diff_" + variant + ".plan.json");
  std::vector<std::string> args = {"plan", "tests/fixtures/tied_lm.pt"};
  const auto& flags = variants().at(variant);
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"-o", out, "-q"});
  const RunResult r = mfsdp(args);
  EXPECT_EQ(r.exit_code, 0) << variant << ": " << r.err;
  written[variant] = out;
  return out;
}

RunResult diff(const std::string& a, const std::string& b, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"diff", plan_of(a), plan_of(b)};
  args.insert(args.end(), extra.begin(), extra.end());
  return mfsdp(args);
}

TEST(DiffCli, IdenticalPlansExitZeroAndPrintNothing) {
  const RunResult r = mfsdp({"diff", "plans/tied_lm.plan.json", plan_of("base")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out + r.err, "");
}

TEST(DiffCli, ModelPathIsIgnoredUnlessIncluded) {
  // The same model named by its absolute path: recorded as it is.
  const std::string absolute = kRepo + "/tests/fixtures/tied_lm.pt";
  const std::string moved = temp_path("diff_absolute_path.plan.json");
  ASSERT_EQ(mfsdp({"plan", absolute, "--world-size", "2", "--unit", "layers.*", "--unit", "<root>",
                   "-o", moved, "-q"})
                .exit_code,
            0);
  EXPECT_EQ(mfsdp({"diff", plan_of("base"), moved}).exit_code, 0);
  const RunResult r = mfsdp({"diff", plan_of("base"), moved, "--include", "model.path"});
  EXPECT_EQ(r.exit_code, 1);
  // The base plan's path is relative to its directory, wherever the repository is.
  EXPECT_TRUE(contains(r.out, "~ model.path \"")) << r.out;
  EXPECT_FALSE(contains(r.out, "~ model.path \"/")) << r.out;
  EXPECT_TRUE(contains(r.out, "tests/fixtures/tied_lm.pt\" → \"" + absolute + "\"")) << r.out;
}

TEST(DiffCli, NewUnitsAreAddedWithTheirOrderPositionsAndDiagnostics) {
  const RunResult r = diff("base", "hoisted");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(contains(r.out, "summary: 2 units added; 4 order changes; 3 diagnostics added\n"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "  + wte (Embedding): new unit, owns no parameters\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "  + lm_head (Linear): new unit, owns no parameters\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "  + wte: forward position 2 (new)\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "  + lm_head: backward position 2 (new)\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "  + info ownership.hoisted (wte.weight): parameter wte.weight"))
      << r.out;
}

TEST(DiffCli, UnitFoldedIntoItsParentIsMergedWithItsParameters) {
  const RunResult r = diff("base", "layer1_in_root");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.out,
                       "  - layers.1 (Block): removed, merged into <root>: layers.1.* (12 "
                       "parameters, 49.6 KiB)\n"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "  ~ <root>: unsharded_bytes 40.2 KiB → 89.9 KiB")) << r.out;
  EXPECT_TRUE(contains(r.out, "  - layers.1: forward position 3 (gone)\n")) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "  ~ layers.0: backward all-gather issued at pre_backward layers.1 "
                       "→ pre_backward <root>\n"))
      << r.out;
  // And back: the unit is split off its parent again.
  const RunResult back = diff("layer1_in_root", "base");
  EXPECT_TRUE(contains(back.out,
                       "  + layers.1 (Block): new unit, split off <root>: layers.1.* "
                       "(12 parameters, 49.6 KiB)\n"))
      << back.out;
}

TEST(DiffCli, WorldSizeChangesTheMeshAndMemoryWithPercentages) {
  const RunResult r = diff("base", "world4");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.out, "summary: mesh changed; per-rank memory -25.0%\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "  ~ world_size 2 → 4\n  ~ shard_size 2 → 4\n")) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "  sharded_param_bytes              69.8 KiB → 34.9 KiB   -34.9 "
                       "KiB (-50.0%)\n"))
      << r.out;
  EXPECT_FALSE(contains(r.out, "Units")) << r.out;  // unit shard sizes follow the mesh
}

TEST(DiffCli, PrefetchDepthMovesAllGathersEarlier) {
  const RunResult r = diff("base", "prefetch2");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.out, "  ~ forward_prefetch 1 → 2\n  ~ backward_prefetch 1 → 2\n"))
      << r.out;
  EXPECT_TRUE(contains(r.out,
                       "  ~ layers.1: forward all-gather issued at pre_forward layers.0 → "
                       "pre_forward <root>\n"))
      << r.out;
}

TEST(DiffCli, ManyDiagnosticsOfOneCodeReadAsOneLine) {
  const RunResult r = diff("base", "module_list", {"--fail-on", "diagnostics-added=warning"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.out,
                       "  + 24 × info ownership.hoisted (layers.0.ln1.weight, "
                       "layers.0.ln1.bias, layers.0.attn.qkv.weight and 21 more): e.g. "
                       "parameter layers.0.ln1.weight is used by units layers, <root>;"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "  + warning unit.never_called (layers): ")) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "  - layers.0 (Block): removed, merged into <root>: layers.0.* (12 "
                       "parameters, 49.6 KiB)\n"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "  FAIL diagnostics-added=warning: diagnostics added: 1\n")) << r.out;
}

TEST(DiffCli, JsonFormatHasEveryChangeTyped) {
  const RunResult r = diff("base", "layer1_in_root", {"--format", "json"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["same"], false);
  EXPECT_EQ(doc["ignored"], (std::vector<std::string>{"generator", "model.path", "model.sha256"}));
  ASSERT_EQ(doc["units"].size(), 1u);
  EXPECT_EQ(doc["units"][0]["change"], "removed");
  EXPECT_EQ(doc["units"][0]["to"][0]["unit"], "<root>");
  EXPECT_EQ(doc["units"][0]["to"][0]["parameters"].size(), 12u);
  EXPECT_EQ(doc["orders"][0]["old_position"], 3);
  EXPECT_TRUE(doc["orders"][0]["new_position"].is_null());
  EXPECT_EQ(doc["totals"]["communication_bytes"]["percent"], -13.1);
}

TEST(DiffCli, JsonOfIdenticalPlansSaysSame) {
  const RunResult r = diff("base", "base", {"--format", "json"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(r.out)["same"], true);
}

TEST(DiffCli, MarkdownQuotesEveryNameForAPullRequestComment) {
  const RunResult r = diff("base", "hoisted", {"--format", "markdown"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.out.rfind("### mfsdp plan diff\n", 0), 0u) << r.out;
  EXPECT_TRUE(contains(r.out, "\n#### Units\n\n- **+** `wte` (`Embedding`): new unit")) << r.out;
  // Outside code spans '<root>' would be an HTML tag.
  std::string prose;
  bool in_code = false;
  for (char c : r.out) {
    if (c == '`') in_code = !in_code;
    if (!in_code) prose += c;
  }
  EXPECT_FALSE(contains(prose, "<")) << r.out;
  const RunResult same = diff("base", "base", {"--format", "markdown"});
  EXPECT_TRUE(contains(same.out, ": no changes (ignoring `generator`")) << same.out;
}

TEST(DiffCli, ColourOnlyWhenAskedOrOnATerminal) {
  EXPECT_FALSE(contains(diff("base", "world4").out, "\x1b["));
  EXPECT_TRUE(contains(diff("base", "world4", {"--color", "always"}).out, "\x1b[33m~\x1b[0m"));
  EXPECT_FALSE(
      contains(diff("base", "world4", {"--color", "always", "--format", "markdown"}).out, "\x1b["));
}

TEST(DiffCli, QuietAnswersWithTheExitStatusOnly) {
  const RunResult r = diff("base", "world4", {"--quiet"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out + r.err, "");
}

TEST(DiffCli, FailOnExitsOneOnlyWhenAThresholdTrips) {
  // Four ranks instead of two: per-rank memory -25%; back again: +33.3%.
  RunResult r = diff("base", "world4", {"--fail-on", "memory-increase=5%"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "~ world_size 2 → 4")) << r.out;  // the diff is still printed
  EXPECT_TRUE(contains(r.out,
                       "fail-on\n  ok memory-increase=5%: per-rank memory 279.0 KiB → "
                       "209.2 KiB (-25.0%)\n"))
      << r.out;
  r = diff("world4", "base", {"--fail-on", "memory-increase=5%"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.out,
                       "  FAIL memory-increase=5%: per-rank memory 209.2 KiB → 279.0 KiB "
                       "(+33.3%)\n"))
      << r.out;
  EXPECT_EQ(diff("world4", "base", {"--fail-on", "memory-increase=40%"}).exit_code, 0);
  EXPECT_EQ(diff("world4", "base", {"--fail-on", "memory-increase=64KiB"}).exit_code, 1);
  EXPECT_EQ(diff("world4", "base", {"--fail-on", "memory-increase=1MiB"}).exit_code, 0);
  EXPECT_EQ(diff("base", "world4", {"--fail-on", "mesh-changed"}).exit_code, 1);
  EXPECT_EQ(diff("base", "world4", {"--fail-on", "units-changed"}).exit_code, 0);
  EXPECT_EQ(diff("base", "hoisted", {"--fail-on", "units-changed"}).exit_code, 1);
  EXPECT_EQ(diff("base", "hoisted", {"--fail-on", "diagnostics-added=warning"}).exit_code, 0);
  EXPECT_EQ(diff("base", "hoisted", {"--fail-on", "diagnostics-added"}).exit_code, 1);
  EXPECT_EQ(diff("base", "prefetch2", {"--fail-on", "schedule-changed"}).exit_code, 1);
  EXPECT_EQ(diff("base", "prefetch2", {"--fail-on", "comm-increase=0%"}).exit_code, 0);
}

TEST(DiffCli, IgnoredFieldsDoNotCount) {
  EXPECT_EQ(diff("base", "world4", {"--ignore", "mesh", "--ignore", "memory"}).exit_code, 0);
  const RunResult r = diff("base", "hoisted", {"--ignore", "diagnostics"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(contains(r.out, "Diagnostics")) << r.out;
}

// Every failure: exit 2, one line on stderr naming the problem, nothing on stdout.
void expect_usage_error(const std::vector<std::string>& args, const std::string& text) {
  std::vector<std::string> all = {"diff"};
  all.insert(all.end(), args.begin(), args.end());
  const RunResult r = mfsdp(all);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, text)) << r.err;
  EXPECT_EQ(r.out, "");
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

TEST(DiffCli, MalformedPlansAreOneLineAndExitTwo) {
  const std::string good = "plans/tied_lm.plan.json";
  expect_usage_error({good, "missing.plan.json"}, "missing.plan.json: cannot read");
  expect_usage_error({write("diff_empty.json", ""), good}, "diff_empty.json: empty file");
  expect_usage_error({good, write("diff_text.json", "not json\n")},
                     "diff_text.json: not valid JSON");
  expect_usage_error({good, write("diff_cut.json", "{\"schema\": \"mfsdp.plan/1\", \"units\": [")},
                     "diff_cut.json: not valid JSON");
  expect_usage_error({good, write("diff_other.json", "{\"schema\": \"other/7\"}")},
                     "diff_other.json");
  expect_usage_error({good, write("diff_shape.json", "{\"schema\": \"mfsdp.plan/1\"}")},
                     "diff_shape.json: not a valid plan (");
  std::ifstream in(kRepo + "/plans/tied_lm.plan.json");
  auto doc = nlohmann::json::parse(in);
  doc["mesh"]["world_size"] = "two";
  expect_usage_error({good, write("diff_type.json", doc.dump())},
                     "diff_type.json: not a valid plan (mesh.world_size: ");
  expect_usage_error({good, ::testing::TempDir()}, "cannot read");
}

TEST(DiffCli, APlanWhoseTotalsOverflowIsRefusedInsteadOfPassingAThreshold) {
  // 2^62 + 2^62 bytes of params and grads wrapped to a negative total: a decrease that passed
  // memory-increase=5%.
  const std::string overflowing = "tests/fixtures/bad/memory_overflow.plan.json";
  expect_usage_error({"plans/two_roots.plan.json", overflowing, "--fail-on", "memory-increase=5%"},
                     overflowing +
                         ": not a valid plan (memory: the memory per rank (sharded_param_bytes + "
                         "sharded_grad_bytes + slot_bytes) adds up to more than "
                         "9223372036854775807 bytes, the most a plan can hold");
  expect_usage_error({"tests/fixtures/bad/nul_after_plan.plan.json", "plans/two_roots.plan.json"},
                     "nul_after_plan.plan.json: not valid JSON: trailing content after the JSON "
                     "document: a NUL byte at byte offset 6411");
}

TEST(DiffCli, BadFlagsAreOneLineAndExitTwo) {
  const std::string a = "plans/tied_lm.plan.json";
  expect_usage_error({a}, "new is required");
  expect_usage_error({a, a, "--format", "xml"}, "--format 'xml' is not text, json or markdown");
  expect_usage_error({a, a, "--color", "sometimes"}, "--color 'sometimes'");
  expect_usage_error({a, a, "--ignore", "mesh.size"}, "--ignore 'mesh.size' is not a plan field");
  expect_usage_error({a, a, "--fail-on", "memory"}, "--fail-on 'memory': unknown threshold");
  expect_usage_error({a, a, "--fail-on", "memory-increase"}, "expected memory-increase=N%");
  expect_usage_error({a, a, "--fail-on", "memory-increase=5"}, "expected memory-increase=N%");
  // Not a number, and more digits than a double holds: usage errors, not internal ones.
  expect_usage_error({a, a, "--fail-on", "memory-increase=.%"}, "expected memory-increase=N%");
  expect_usage_error({a, a, "--fail-on", "memory-increase=" + std::string(400, '9') + "%"},
                     "expected memory-increase=N%");
  expect_usage_error({a, a, "--fail-on", "comm-increase=lots"}, "'lots' is not a byte size");
  expect_usage_error({a, a, "--fail-on", "units-changed=2"}, "units-changed takes no value");
  expect_usage_error({a, a, "--fail-on", "diagnostics-added=fatal"}, "severity must be");
}

TEST(DiffCli, HelpTeachesWithExamples) {
  const RunResult r = mfsdp({"diff", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "--fail-on memory-increase=5%")) << r.out;
  EXPECT_TRUE(contains(r.out, "Exit codes: 0 same, 1 different")) << r.out;
}

}  // namespace
}  // namespace mfsdp::testing
