// `mfsdp plan` as a user runs it: the real binary in a subprocess, from the repository root.
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_support.h"

namespace mfsdp::testing {
namespace {

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// 1-based line of the first byte where the texts differ.
size_t first_difference(const std::string& a, const std::string& b) {
  size_t line = 1;
  for (size_t i = 0; i < a.size() && i < b.size() && a[i] == b[i]; ++i) line += a[i] == '\n';
  return line;
}

// Each failure: the documented exit code, exactly one line on stderr naming the problem, and
// no output file.
void expect_clean_failure(const std::vector<std::string>& args, int code, const std::string& text) {
  const std::string out = temp_path("must_not_exist.plan.json");
  std::remove(out.c_str());
  std::vector<std::string> all = {"plan"};
  all.insert(all.end(), args.begin(), args.end());
  all.insert(all.end(), {"-o", out});
  const RunResult r = mfsdp(all);
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
  EXPECT_FALSE(exists(out));
}

TEST(PlanCli, EveryGoldenPlanIsReproducedByteForByte) {
  std::ifstream list(kRepo + "/plans/golden.list");
  ASSERT_TRUE(list.good());
  std::string line;
  int checked = 0;
  while (std::getline(list, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string name, word;
    words >> name;
    std::vector<std::string> args = {"plan"};
    while (words >> word) args.push_back(word);
    // Beside the golden one: a plan records its model relative to its own directory.
    const std::string out =
        kRepo + "/plans/.plan-cli-test." + std::to_string(::getpid()) + "." + name + ".plan.json";
    args.insert(args.end(), {"-o", out, "--quiet"});
    const RunResult r = mfsdp(args);
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    const std::string got = read_file(out);
    std::remove(out.c_str());
    const std::string golden = read_file(kRepo + "/plans/" + name + ".plan.json");
    EXPECT_TRUE(got == golden) << name << " drifted from its golden plan at line "
                               << first_difference(got, golden)
                               << "; if intended, run scripts/refresh-plans";
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(PlanCli, PrintsSummaryWithOrdersAndDiagnosticsOnStderr) {
  const RunResult r =
      mfsdp({"plan", "tests/fixtures/reordered.pt", "--world-size", "2", "--unit", "stem", "--unit",
             "blocks.*", "--unit", "head", "-o", temp_path("summary.plan.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("forward      stem > blocks.2 > blocks.0 > blocks.1 > head"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("order.differs_from_definition: unit blocks.2 runs at forward position 2"),
            std::string::npos)
      << r.err;
}

// `--unit layers` names a ModuleList, whose forward nobody calls: the summary must show that
// warning, with the fix, ahead of the dozens of infos the one-unit plan also gets.
TEST(PlanCli, AContainerGivenAsAUnitIsWarnedAboutFirstWithTheFix) {
  const RunResult r = mfsdp({"plan", "examples/bytegpt.pt", "--world-size", "2", "--unit", "layers",
                             "--unit", "<root>", "-o", temp_path("container.plan.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t header = r.err.find("  diagnostics  50 (1 warning, 49 info)\n");
  ASSERT_NE(header, std::string::npos) << r.err;
  EXPECT_EQ(
      r.err.find("    warning unit.never_called: unit layers is not called by forward", header),
      r.err.find('\n', header) + 1)
      << r.err;
  EXPECT_NE(r.err.find("forward calls its children instead (a container such as a ModuleList): "
                       "shard them, e.g. --unit 'layers.*'"),
            std::string::npos)
      << r.err;
}

TEST(PlanCli, QuietPrintsNothingAndJsonSummaryIsJson) {
  const std::string out = temp_path("quiet.plan.json");
  RunResult r = mfsdp(
      {"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--auto", "-o", out, "--quiet"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out + r.err, "");
  r = mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--auto", "-o", out,
             "--json-summary"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = nlohmann::json::parse(r.out);
  EXPECT_EQ(summary["forward_order"], (std::vector<std::string>{"<root>", "layers.0", "layers.1"}));
  EXPECT_EQ(summary["output"], out);
}

TEST(PlanCli, AutoEqualsExplicitListPlusRoot) {
  const std::string a = temp_path("auto.plan.json"), b = temp_path("explicit.plan.json");
  ASSERT_EQ(mfsdp({"plan", "tests/fixtures/untied_lm.pt", "--world-size", "4", "--auto", "-o", a})
                .exit_code,
            0);
  ASSERT_EQ(mfsdp({"plan", "tests/fixtures/untied_lm.pt", "--world-size", "4", "--unit", "layers.*",
                   "--unit", "<root>", "-o", b})
                .exit_code,
            0);
  EXPECT_EQ(read_file(a), read_file(b));
}

TEST(PlanCli, ScopeFileGivesTheSamePlanAsFlagsAndFlagsWin) {
  const std::string scope = temp_path("scope.json");
  std::ofstream(scope) << R"({"mesh": {"world_size": 4}, "policy": {"forward_prefetch": 0},
                              "fully_shard": ["layers.*", "<root>"]})";
  const std::string a = temp_path("scope.plan.json"), b = temp_path("flags.plan.json");
  RunResult r = mfsdp(
      {"plan", "tests/fixtures/tied_lm.pt", "--scope", scope, "--world-size", "2", "-o", a, "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--forward-prefetch", "0",
             "--unit", "layers.*", "--unit", "<root>", "-o", b, "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(a), read_file(b));
}

TEST(PlanCli, DefaultOutputIsNamedAfterTheModel) {
  const std::string dir = temp_path("default_out");
  mkdir(dir.c_str(), 0755);
  const RunResult r = run_program(MFSDP_BINARY,
                                  {"plan", kRepo + "/tests/fixtures/two_roots.pt", "--world-size",
                                   "1", "--unit", "encoder", "--unit", "decoder", "-q"},
                                  dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(exists(dir + "/two_roots.plan.json"));
}

TEST(PlanCli, HelpTeachesWithExamples) {
  const RunResult r = mfsdp({"plan", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("mfsdp plan gpt.pt --world-size 8 --unit 'layers.*' --unit '<root>'"),
            std::string::npos);
  EXPECT_NE(r.out.find("--resident-budget"), std::string::npos);
  // Each switch's two spellings are two documented flags, not a parser's notation.
  EXPECT_EQ(r.out.find("{false}"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(",--no-"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--no-reshard-after-forward  Keep each unit gathered"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--forward-prefetch INT      Prefetch depth in forward (default: "),
            std::string::npos)
      << r.out;
}

TEST(PlanCli, BothSpellingsOfASwitchAreRefused) {
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "<root>",
                        "--unified-stream", "--no-unified-stream"},
                       2, "--unified-stream and --no-unified-stream contradict each other");
}

TEST(PlanCli, FailedPlanLeavesExistingOutputUntouched) {
  const std::string out = temp_path("keep.plan.json");
  std::ofstream(out) << "previous";
  const RunResult r = mfsdp(
      {"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "nothing.*", "-o", out});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(read_file(out), "previous");
}

TEST(PlanCli, MissingModelFile) {
  expect_clean_failure({"missing.pt", "--world-size", "2", "--auto"}, 3,
                       "missing.pt: cannot open the model file");
}

TEST(PlanCli, EmptyModelFile) {
  const std::string empty = temp_path("empty.pt");
  std::ofstream(empty).close();
  expect_clean_failure({empty, "--world-size", "2", "--auto"}, 3, "the model file is empty");
}

TEST(PlanCli, TextAndZipAndTruncatedFilesAreNotModels) {
  const std::string text = temp_path("notes.pt");
  std::ofstream(text) << "just text\n";
  expect_clean_failure({text, "--world-size", "2", "--auto"}, 3, "not a TorchScript archive");
  expect_clean_failure({"tests/fixtures/bad/not_torchscript.zip", "--world-size", "2", "--auto"}, 3,
                       "not a TorchScript model");
  expect_clean_failure({"tests/fixtures/bad/truncated.pt", "--world-size", "2", "--auto"}, 3,
                       "not a TorchScript archive, or truncated");
}

TEST(PlanCli, ModuleWithoutForward) {
  expect_clean_failure(
      {"tests/fixtures/bad/no_forward.pt", "--world-size", "2", "--unit", "<root>"}, 3,
      "the module has no forward method");
}

TEST(PlanCli, BadFlags) {
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2", "--auto", "--bogus"}, 2,
                       "--bogus");
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "0", "--auto"}, 2,
                       "--world-size 0 is invalid");
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--auto"}, 2, "--world-size is required");
  expect_clean_failure(
      {"tests/fixtures/tied_lm.pt", "--world-size", "4", "--replicate", "3", "--auto"}, 2,
      "--replicate (mesh.replicate_size) 3 must be at least 1 and divide the world size 4");
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2"}, 2,
                       "choose the units one way");
  expect_clean_failure(
      {"tests/fixtures/tied_lm.pt", "--world-size", "2", "--auto", "--resident-budget", "lots"}, 2,
      "--resident-budget 'lots' is not a byte size");
}

// Misspelled flags, as newcomers and torchrun users type them, get the closest real one.
TEST(PlanCli, MisspelledFlagsAreNamedWithTheClosestRealOne) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--world_size", "mfsdp plan has no flag --world_size; did you mean --world-size?"},
      {"--units", "mfsdp plan has no flag --units; did you mean --unit?"},
      {"--optimiser", "mfsdp plan has no flag --optimiser; did you mean --optimizer?"},
      {"--frobnicate", "mfsdp plan has no flag --frobnicate (see mfsdp plan --help)"}};
  for (const auto& [flag, message] : cases) {
    SCOPED_TRACE(flag);
    expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2", "--auto", flag, "2"}, 2,
                         message);
  }
  const RunResult r = mfsdp({"run", "plans/bytegpt.plan.json", "--nproc_per_node", "2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "mfsdp: error: mfsdp run has no flag --nproc_per_node; did you mean --nproc-per-node? "
            "(see mfsdp run --help)\n");
}

// A first word that is no command names the commands, and the one that has it as a flag or is
// spelled closest to it.
TEST(PlanCli, AnUnknownCommandListsTheCommandsAndTheClosestOne) {
  const RunResult predict = mfsdp({"predict", "plans/bytegpt.plan.json"});
  EXPECT_EQ(predict.exit_code, 2);
  EXPECT_EQ(predict.err.rfind("mfsdp: error: 'predict' is not a command; the commands are ", 0), 0u)
      << predict.err;
  EXPECT_NE(predict.err.find("plan, run, "), std::string::npos) << predict.err;
  EXPECT_NE(predict.err.find("; did you mean mfsdp show --predict? (see mfsdp --help)\n"),
            std::string::npos)
      << predict.err;
  const RunResult typo = mfsdp({"paln", "tests/fixtures/tied_lm.pt"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("; did you mean mfsdp plan? (see mfsdp --help)\n"), std::string::npos)
      << typo.err;
  EXPECT_EQ(std::count(typo.err.begin(), typo.err.end(), '\n'), 1) << typo.err;
}

TEST(PlanCli, AFloatTraceInputForATokenModelIsToldToSayInt64) {
  expect_clean_failure({"examples/bytegpt.pt", "--world-size", "2", "--unit", "layers.*", "--unit",
                        "<root>", "--trace-input", "8x64"},
                       3,
                       "; the model wants integer ids there, and --trace-input makes float32 "
                       "unless told: trace with --trace-input 8x64:int64");
}

TEST(PlanCli, BadPolicyValuesFailBeforeLoadingTheModelNamingTheFlag) {
  // The model path does not exist: the policy error must come first.
  expect_clean_failure({"missing.pt", "--world-size", "2", "--auto", "--param-dtype", "int8"}, 2,
                       "--param-dtype (policy.param_dtype) 'int8' is not a floating dtype; use "
                       "float32, bfloat16, float16 or float64 (or keep)");
  expect_clean_failure({"missing.pt", "--world-size", "2", "--auto", "--align", "24"}, 2,
                       "--align (policy.align_bytes) 24 is not a power of two");
  expect_clean_failure({"missing.pt", "--world-size", "2", "--auto", "--align", "8"}, 2,
                       "--align (policy.align_bytes) 8 is too small; it must be a power of two "
                       "from 16");
  expect_clean_failure({"missing.pt", "--world-size", "2", "--auto", "--prefetch", "-1"}, 2,
                       "must be 0 (no prefetch) or more");
}

TEST(PlanCli, SizesBeyondWhatAPlanHoldsAreUsageErrorsSayingTheLimit) {
  const std::string ranks =
      "it must be from 1 to 2147483647 (ranks are 32-bit ints in Gloo and NCCL)";
  // 2^62 × 4 alignment elements once wrapped to 0 and divided by it (SIGFPE); 2^63 - 1 and
  // beyond-64-bit values were taken as given, or clamped, and made plans validate refuses.
  for (const char* world :
       {"4611686018427387904", "9223372036854775807", "99999999999999999999", "2147483648"}) {
    expect_clean_failure({"missing.pt", "--world-size", world, "--auto"}, 2,
                         "--world-size " + std::string(world) + " is invalid; " + ranks);
  }
  expect_clean_failure({"missing.pt", "--world-size", "2x", "--auto"}, 2,
                       "--world-size '2x' is not a whole number; " + ranks);
  expect_clean_failure(
      {"missing.pt", "--world-size", "2", "--replicate", "99999999999999999999", "--auto"}, 2,
      "--replicate 99999999999999999999 is invalid; " + ranks);
  expect_clean_failure(
      {"missing.pt", "--world-size", "2", "--auto", "--align", "4611686018427387904"}, 2,
      "--align (policy.align_bytes) 4611686018427387904 is too large; it must be a power of two "
      "from 16 to 1073741824 (1 GiB)");
  expect_clean_failure(
      {"missing.pt", "--world-size", "2", "--auto", "--align", "99999999999999999999"}, 2,
      "--align (policy.align_bytes) 99999999999999999999 is invalid; it must be a power of two "
      "from 16 to 1073741824 (1 GiB)");
  expect_clean_failure(
      {"missing.pt", "--world-size", "2", "--auto", "--prefetch", "99999999999999999999"}, 2,
      "--prefetch 99999999999999999999 is invalid; it must be 0 (no prefetch) or more, up to "
      "9223372036854775807");
  expect_clean_failure(
      {"missing.pt", "--world-size", "2", "--auto", "--resident-budget", "99999999999999999999"}, 2,
      "--resident-budget '99999999999999999999' is too large; a byte size is at "
      "most 9223372036854775807 bytes (8 EiB)");
  expect_clean_failure(
      {"missing.pt", "--world-size", "2", "--auto", "--resident-budget", "9000000TiB"}, 2,
      "--resident-budget '9000000TiB' is too large");
}

TEST(PlanCli, ScopeFileSizesBeyondWhatAPlanHoldsAreUsageErrorsNamingTheKey) {
  const std::string scope = "tests/fixtures/bad/huge_world_size.scope.json";
  expect_clean_failure({"missing.pt", "--scope", scope}, 2,
                       scope +
                           ": mesh.world_size 4611686018427387904 is invalid; it must be from "
                           "1 to 2147483647");
  expect_clean_failure({"missing.pt", "--scope", "tests/fixtures/bad/huge_align.scope.json"}, 2,
                       "tests/fixtures/bad/huge_align.scope.json: policy.align_bytes "
                       "4611686018427387904 is too large; it must be a power of two");
  const std::string wrapped = temp_path("scope_wrapped_world.json");
  std::ofstream(wrapped)
      << R"({"mesh": {"world_size": 18446744073709551615}, "fully_shard": ["a"]})";
  expect_clean_failure({"missing.pt", "--scope", wrapped}, 2,
                       wrapped + ": mesh.world_size: 18446744073709551615 is out of range");
  // A flag overrides the file's value, so the file's bad value no longer matters.
  const std::string out = temp_path("scope_huge_world_overridden.plan.json");
  const RunResult r = mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--scope", scope, "--world-size",
                             "2", "-o", out, "-q"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(PlanCli, APlanWhoseSizesOverflowIsAPlanningErrorNotAWrappedPlan) {
  // Each flag at its limit: 2^31 - 1 shards × 2^28 float32 elements of alignment pad every
  // group to about 2^59 elements, and five all-gathers of those overflow 64 bits.
  expect_clean_failure({"examples/bytegpt.pt", "--world-size", "2147483647", "--align",
                        "1073741824", "--unit", "layers.*", "--unit", "<root>"},
                       4,
                       "does not fit in 64 bits (at most 9223372036854775807); plan for a "
                       "smaller world size (--world-size) or alignment (--align)");
}

TEST(PlanCli, FlagsOverrideAScopeFileInBothDirections) {
  const std::string scope = temp_path("scope_policy.json");
  std::ofstream(scope) << R"({"policy": {"reshard_after_forward": false, "unified_stream": true},
                              "fully_shard": ["layers.*", "<root>"]})";
  const std::string out = temp_path("scope_policy.plan.json");
  const RunResult r =
      mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--scope", scope, "--world-size", "2",
             "--reshard-after-forward", "--no-unified-stream", "-o", out, "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto plan = nlohmann::json::parse(read_file(out));
  EXPECT_EQ(plan["policy"]["reshard_after_forward"], true);
  EXPECT_EQ(plan["policy"]["unified_stream"], false);
}

TEST(PlanCli, ScopeFileProblemsNameTheFileAndEntry) {
  const std::string scope = temp_path("scope_bad_type.json");
  std::ofstream(scope)
      << R"({"mesh": {"world_size": 2}, "fully_shard": ["<root>", {"type": "Blk"}]})";
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--scope", scope}, 4,
                       scope + ": fully_shard[1] 'Blk' matches no module");
  const std::string typo = temp_path("scope_typo_top.json");
  std::ofstream(typo) << R"({"units": ["<root>"]})";
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--scope", typo}, 2,
                       typo + ": units: unknown field");
}

TEST(PlanCli, SelectorProblems) {
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "blocks.*"}, 4,
                       "--unit 'blocks.*' matches no module");
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "layers.*",
                        "--unit-type", "Block"},
                       4, "both select module layers.0");
}

TEST(PlanCli, ParametersOutsideEveryUnitAreRefused) {
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "layers.*"}, 4,
                       "mfsdp plan covers the whole model, but 4 parameter(s) (wte.weight, "
                       "wpe.weight, ln_f.weight, ln_f.bias) are in no unit of this scope; add a "
                       "unit that contains them, e.g. --unit '<root>'");
}

// --checkpoint and --checkpoint-type mark units for activation checkpointing; a traced plan
// measures what that saves.
// A shape-only trace of the skeleton: the full model's activations (traced on the CPU from
// the model with values), work instead of times, a valid plan that `show` tabulates, and
// the flags that need times refused.
TEST(PlanCli, AMetaTracePlansASkeletonWithTheFullModelsActivations) {
  const std::string meta = temp_path("meta_trace.plan.json");
  const std::string cpu = temp_path("cpu_trace.plan.json");
  const std::vector<std::string> units = {"--world-size",  "2",          "--unit",
                                          "layers.*",      "--unit",     "<root>",
                                          "--trace-input", "4x16:int64", "-q"};
  std::vector<std::string> args = {"plan", "tests/fixtures/safetensors/tied_lm_skeleton.pt"};
  args.insert(args.end(), units.begin(), units.end());
  args.insert(args.end(), {"--trace-device", "meta", "-o", meta});
  const RunResult r = mfsdp(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  args = {"plan", "tests/fixtures/tied_lm.pt"};
  args.insert(args.end(), units.begin(), units.end());
  args.insert(args.end(), {"-o", cpu});
  ASSERT_EQ(mfsdp(args).exit_code, 0);

  const auto m = nlohmann::json::parse(read_file(meta));
  const auto c = nlohmann::json::parse(read_file(cpu));
  EXPECT_EQ(m["memory"]["activations"], c["memory"]["activations"]);
  EXPECT_EQ(m["trace"]["device"], "meta");
  EXPECT_TRUE(m["trace"]["times"].empty());
  EXPECT_FALSE(m["trace"].contains("calibration_gflops"));
  ASSERT_EQ(m["trace"]["work"].size(), m["forward_order"].size());
  EXPECT_GT(m["trace"]["work"][1]["pre_forward"]["matmul"]["flops"].get<int64_t>(), 0);

  EXPECT_EQ(mfsdp({"validate", meta}).exit_code, 0);
  const RunResult shown = mfsdp({"show", meta});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("shapes only (--trace-device meta): work per unit, no times"),
            std::string::npos)
      << shown.out;
  EXPECT_NE(shown.out.find("% of it in matmuls and attention"), std::string::npos) << shown.out;
}

// --fused-attention: the meta trace of a skeleton whose attention is scaled-dot-product
// attention records it ran fused, saves less than the same trace as LibTorch runs attention,
// and predicts a faster step on a GPU profile; it is refused on the CPU and on a model
// without that attention.
TEST(PlanCli, FusedAttentionRecordsItsTraceAndKeepsNoScores) {
  const RunResult version = mfsdp({"--version"});
  if (version.out.find("LibTorch 1.") == std::string::npos) {
    GTEST_SKIP() << "sdpa_llama_skeleton.pt holds 1.13's attention operator";
  }
  const std::string fused = temp_path("fused_attention.plan.json");
  const std::string math = temp_path("math_attention.plan.json");
  const std::vector<std::string> args = {"plan",
                                         "tests/fixtures/sdpa_llama_skeleton.pt",
                                         "--world-size",
                                         "2",
                                         "--unit",
                                         "layers.*",
                                         "--unit",
                                         "<root>",
                                         "--trace-input",
                                         "2x128:int64",
                                         "--trace-device",
                                         "meta",
                                         "--profile",
                                         "h100-nvlink",
                                         "-q"};
  std::vector<std::string> with_fused = args;
  with_fused.insert(with_fused.end(), {"--fused-attention", "-o", fused});
  const RunResult r = mfsdp(with_fused);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> as_traced = args;
  as_traced.insert(as_traced.end(), {"-o", math});
  ASSERT_EQ(mfsdp(as_traced).exit_code, 0);
  const auto f = nlohmann::json::parse(read_file(fused));
  const auto m = nlohmann::json::parse(read_file(math));
  EXPECT_EQ(f["trace"]["attention"], "fused");
  EXPECT_FALSE(m["trace"].contains("attention"));
  EXPECT_LT(f["memory"]["activations"]["peak_bytes"].get<int64_t>(),
            m["memory"]["activations"]["peak_bytes"].get<int64_t>());
  EXPECT_LT(f["prediction"]["step_ms"].get<double>(), m["prediction"]["step_ms"].get<double>());
  EXPECT_EQ(mfsdp({"validate", fused}).exit_code, 0);
  // The search traces every choice of units so too.
  const std::string searched = temp_path("fused_attention_search.plan.json");
  std::vector<std::string> search = args;
  search.insert(search.end(), {"--fused-attention", "--optimize", "-o", searched});
  const RunResult s = mfsdp(search);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(nlohmann::json::parse(read_file(searched))["trace"]["attention"], "fused");

  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2", "--auto", "--trace-input",
                        "2x16:int64", "--fused-attention"},
                       2,
                       "--fused-attention models a GPU's attention kernel in a shape-only "
                       "trace; add --trace-device meta");
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2", "--auto", "--trace-input",
                        "2x16:int64", "--trace-device", "meta", "--fused-attention"},
                       2, "calls no scaled-dot-product attention");
}

// --optimize on a meta trace traces each choice of units on meta tensors and weighs their
// activations: a budget below the unsharded plan's activations picks a checkpointed plan.
TEST(PlanCli, OptimizeOnAMetaTraceCountsEachChoicesActivations) {
  const std::string out = temp_path("meta_optimized.plan.json");
  const std::vector<std::string> base = {"plan",
                                         "tests/fixtures/safetensors/tied_lm_skeleton.pt",
                                         "--world-size",
                                         "2",
                                         "--unit",
                                         "layers.*",
                                         "--unit",
                                         "<root>",
                                         "--trace-input",
                                         "8x64:int64",
                                         "--trace-device",
                                         "meta",
                                         "-o",
                                         out};
  std::vector<std::string> plain = base;
  plain.push_back("-q");
  ASSERT_EQ(mfsdp(plain).exit_code, 0);
  const auto yours = nlohmann::json::parse(read_file(out));
  const int64_t peak = yours["memory"]["activations"]["peak_bytes"].get<int64_t>();
  const int64_t state = yours["memory"]["sharded_param_bytes"].get<int64_t>() * 4 +
                        yours["memory"]["slot_bytes"].get<int64_t>();
  // Room for the state and three quarters of the unsharded plan's activations.
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--optimize", "--memory-budget", std::to_string(state + peak * 3 / 4)});
  const RunResult r = mfsdp(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("optimized by memory alone (meta trace, activations counted)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("yours is over the budget"), std::string::npos) << r.err;
  const auto chosen = nlohmann::json::parse(read_file(out));
  EXPECT_EQ(chosen["trace"]["device"], "meta");
  EXPECT_LT(chosen["memory"]["activations"]["peak_bytes"].get<int64_t>(), peak);
  bool checkpointed = false;
  for (const auto& unit : chosen["units"]) checkpointed |= unit.value("checkpoint", false);
  EXPECT_TRUE(checkpointed);
}

// With a GPU profile a meta trace's work is timed at its compute rates: the plan records the
// step `mfsdp show --predict` gives, a larger microbatch costs more but less than in
// proportion (each operator's fixed time stays), and --optimize needs no budget to rank plans.
TEST(PlanCli, AMetaTraceWithAGpuProfilePredictsTheStep) {
  const std::string out = temp_path("meta_h100.plan.json");
  const std::vector<std::string> base = {"plan",
                                         "tests/fixtures/safetensors/tied_lm_skeleton.pt",
                                         "--world-size",
                                         "8",
                                         "--unit",
                                         "layers.*",
                                         "--unit",
                                         "<root>",
                                         "--trace-input",
                                         "4x64:int64",
                                         "--trace-device",
                                         "meta",
                                         "--profile",
                                         "h100-nvlink",
                                         "-o",
                                         out};
  const auto step_of = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    const RunResult r = mfsdp(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(read_file(out))["prediction"];
  };
  const nlohmann::json four = step_of({"-q"});
  EXPECT_EQ(four["profile"], "h100-nvlink");
  EXPECT_EQ(four["microbatch_samples"], 4);
  ASSERT_GT(four["compute_ms"].get<double>(), 0);
  const RunResult shown = mfsdp({"show", out, "--predict", "--profile", "h100-nvlink"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  char step[64];
  std::snprintf(step, sizeof step, "step          %.2f ms", four["step_ms"].get<double>());
  EXPECT_NE(shown.out.find(step), std::string::npos) << step << "\n" << shown.out;
  EXPECT_NE(shown.out.find("compute: the trace's work at the rates of profile 'h100-nvlink' "
                           "(float32 66.9 TFLOP/s, 3350 GB/s"),
            std::string::npos)
      << shown.out;

  const nlohmann::json sixteen = step_of({"-q", "--microbatch-size", "16"});
  EXPECT_EQ(sixteen["microbatch_samples"], 16);
  EXPECT_GT(sixteen["compute_ms"].get<double>(), four["compute_ms"].get<double>());
  EXPECT_LT(sixteen["compute_ms"].get<double>(), 4 * four["compute_ms"].get<double>());

  std::vector<std::string> optimize = base;
  optimize.push_back("--optimize");
  const RunResult r = mfsdp(optimize);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("predicted step"), std::string::npos) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(read_file(out)).contains("prediction"));
}

TEST(PlanCli, AMetaTraceRefusesTheFlagsThatNeedTimes) {
  const std::vector<std::string> base = {"tests/fixtures/tied_lm.pt",
                                         "--world-size",
                                         "2",
                                         "--auto",
                                         "--trace-input",
                                         "2x16:int64",
                                         "--trace-device",
                                         "meta"};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  expect_clean_failure(with({"--trace-repeats", "3"}), 2,
                       "--trace-repeats is for timing the traced step, and a meta trace");
  // A profile with no compute rates, as mfsdp probe writes one on the CPU.
  const std::string cpu_profile = temp_path("no_rates.profile.json");
  std::ofstream(cpu_profile)
      << R"({"schema": "mfsdp.profile/1", "name": "probe", "description": "two CPU ranks",
                 "backend": "gloo", "device": "cpu", "collectives": [], "compute": {}})";
  expect_clean_failure(with({"--profile", cpu_profile}), 2,
                       "has no compute rates (compute.rates) to time a meta trace's work");
  expect_clean_failure(with({"--optimize"}), 2,
                       "--optimize with a meta trace (--trace-device meta) and no --profile "
                       "chooses by memory, activations included, and collectives, and needs "
                       "--memory-budget SIZE");
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2", "--auto", "--trace-input",
                        "2x16:int64", "--trace-device", "gpu"},
                       2, "--trace-device 'gpu': expected cpu or meta");
  expect_clean_failure(
      {"tests/fixtures/tied_lm.pt", "--world-size", "2", "--auto", "--trace-device", "meta"}, 2,
      "--trace-device says where the traced step runs; give --trace-input");
  expect_clean_failure({"tests/fixtures/conditional.pt", "--world-size", "2", "--auto",
                        "--trace-input", "4x8", "--trace-device", "meta"},
                       3, "its code reads a tensor's value (.item(), bool(t), int(t)");
}

TEST(PlanCli, CheckpointMarksUnitsAndTheTraceMeasuresTheSaving) {
  const std::string plain = temp_path("ckpt_plain.plan.json");
  const std::string ckpt = temp_path("ckpt.plan.json");
  const std::string by_type = temp_path("ckpt_type.plan.json");
  const std::vector<std::string> common = {"plan",          "tests/fixtures/tied_lm.pt",
                                           "--world-size",  "2",
                                           "--unit",        "layers.*",
                                           "--unit",        "<root>",
                                           "--trace-input", "4x64:int64"};
  auto with = [&](std::vector<std::string> extra, const std::string& out) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"-o", out});
    return mfsdp(args);
  };
  const RunResult r0 = with({}, plain);
  ASSERT_EQ(r0.exit_code, 0) << r0.err;
  const RunResult r1 = with({"--checkpoint", "layers.*"}, ckpt);
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_NE(r1.err.find("  checkpoint   layers.0, layers.1 (recomputed in backward)\n"),
            std::string::npos)
      << r1.err;
  const RunResult r2 = with({"--checkpoint-type", "Block"}, by_type);
  ASSERT_EQ(r2.exit_code, 0) << r2.err;

  const auto p0 = nlohmann::json::parse(read_file(plain));
  const auto p1 = nlohmann::json::parse(read_file(ckpt));
  for (const auto& unit : p1["units"]) {
    EXPECT_EQ(unit.value("checkpoint", false), unit["name"] != "<root>") << unit["name"];
  }
  for (const auto& unit : p0["units"]) EXPECT_FALSE(unit.contains("checkpoint"));
  // The same units by class; the schedule and the gathered memory do not change.
  EXPECT_EQ(nlohmann::json::parse(read_file(by_type))["units"], p1["units"]);
  EXPECT_EQ(p1["schedule"], p0["schedule"]);
  EXPECT_EQ(p1["memory"]["peak_unsharded_bytes"], p0["memory"]["peak_unsharded_bytes"]);
  // Each block keeps about its input instead of its activations, so the peak drops.
  const auto saved = [](const nlohmann::json& plan, const std::string& unit) {
    for (const auto& u : plan["memory"]["activations"]["units"]) {
      if (u["unit"] == unit) return u["saved_bytes"].get<int64_t>();
    }
    return int64_t{-1};
  };
  EXPECT_LT(saved(p1, "layers.0") * 4, saved(p0, "layers.0"))
      << saved(p1, "layers.0") << " vs " << saved(p0, "layers.0");
  EXPECT_LT(p1["memory"]["activations"]["peak_bytes"].get<int64_t>(),
            p0["memory"]["activations"]["peak_bytes"].get<int64_t>());

  const RunResult valid = mfsdp({"validate", ckpt, "--model", "tests/fixtures/tied_lm.pt"});
  EXPECT_EQ(valid.exit_code, 0) << valid.out << valid.err;
  const RunResult shown = mfsdp({"show", ckpt});
  EXPECT_NE(shown.out.find("root kept"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("checkpoint"), std::string::npos) << shown.out;
  const RunResult diff = mfsdp({"diff", plain, ckpt});
  EXPECT_NE(diff.out.find("checkpoint"), std::string::npos) << diff.out;
}

TEST(PlanCli, CheckpointProblemsAreOneLine) {
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "layers.*",
                        "--unit", "<root>", "--checkpoint", "layers.0.mlp"},
                       4,
                       "--checkpoint 'layers.0.mlp' matches no unit; only units can be "
                       "checkpointed, and the units are: layers.0, layers.1, <root> (make the "
                       "module a unit with --unit too)");
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "layers.*",
                        "--unit", "<root>", "--checkpoint-type", "TinyGPT"},
                       4,
                       "unit '<root>' is checkpointed but contains unit 'layers.0'; checkpoint "
                       "units that hold no other unit (e.g. 'layers.0')");
  const std::string scope = temp_path("scope_checkpoint.json");
  std::ofstream(scope) << R"({"mesh": {"world_size": 2},
      "fully_shard": [{"module": "layers.*", "checkpoint": "yes"}, "<root>"]})";
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--scope", scope}, 2,
                       scope + ": fully_shard[0].checkpoint: expected true or false");
}

TEST(PlanCli, ScopeFileCheckpointEqualsTheFlag) {
  const std::string scope = temp_path("scope_ckpt_ok.json");
  std::ofstream(scope) << R"({"mesh": {"world_size": 2},
      "fully_shard": [{"type": "Block", "checkpoint": true}, "<root>"]})";
  const std::string a = temp_path("scope_ckpt_a.plan.json"),
                    b = temp_path("scope_ckpt_b.plan.json");
  const RunResult ra =
      mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--scope", scope, "-o", a, "-q"});
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  const RunResult rb =
      mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "layers.*",
             "--unit", "<root>", "--checkpoint", "layers.*", "-o", b, "-q"});
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(nlohmann::json::parse(read_file(a))["units"],
            nlohmann::json::parse(read_file(b))["units"]);
}

// --keep-after-forward keeps a unit gathered from its forward to its backward, as a scope
// file's "reshard_after_forward": false does: one all-gather less per step, and its slot held
// through backward.
TEST(PlanCli, KeepAfterForwardIsAPerUnitChoiceAsInTheScopeFile) {
  const std::string plain = temp_path("keep_plain.plan.json"),
                    kept = temp_path("keep_flag.plan.json"),
                    scoped = temp_path("keep_scope.plan.json");
  const std::vector<std::string> units = {"--world-size", "2",      "--unit",
                                          "layers.*",     "--unit", "<root>"};
  const auto plan = [&](std::vector<std::string> extra, const std::string& out) {
    std::vector<std::string> args = {"plan", "tests/fixtures/tied_lm.pt"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"-o", out, "-q"});
    return mfsdp(args);
  };
  ASSERT_EQ(plan(units, plain).exit_code, 0);
  std::vector<std::string> with_keep = units;
  with_keep.insert(with_keep.end(), {"--keep-after-forward", "layers.0"});
  const RunResult r = plan(with_keep, kept);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string scope = temp_path("keep_scope.json");
  std::ofstream(scope) << R"({"mesh": {"world_size": 2}, "fully_shard": [
      {"module": "layers.0", "reshard_after_forward": false}, "layers.1", "<root>"]})";
  ASSERT_EQ(plan({"--scope", scope}, scoped).exit_code, 0);

  const auto p0 = nlohmann::json::parse(read_file(plain));
  const auto p1 = nlohmann::json::parse(read_file(kept));
  EXPECT_EQ(nlohmann::json::parse(read_file(scoped))["units"], p1["units"]);
  EXPECT_EQ(nlohmann::json::parse(read_file(scoped))["schedule"], p1["schedule"]);
  for (const auto& u : p1["units"]) {
    EXPECT_EQ(u["kept_after_forward"], u["name"] != "layers.1") << u.dump();
  }
  EXPECT_EQ(p1["policy"]["reshard_after_forward"], true);  // the policy stays as it was
  const auto gathers = [](const nlohmann::json& p) {
    size_t n = 0;
    for (const auto& e : p["schedule"]) n += e.value("all_gather", nlohmann::json::array()).size();
    return n;
  };
  EXPECT_EQ(gathers(p1) + 1, gathers(p0));
  EXPECT_EQ(mfsdp({"validate", kept, "--model", "tests/fixtures/tied_lm.pt"}).exit_code, 0);
  const RunResult diff = mfsdp({"diff", plain, kept});
  EXPECT_NE(diff.out.find("kept_after_forward"), std::string::npos) << diff.out;

  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "layers.*",
                        "--unit", "<root>", "--keep-after-forward", "wte"},
                       4,
                       "--keep-after-forward 'wte' matches no unit; only units can be kept "
                       "after forward, and the units are: layers.0, layers.1, <root>");
  std::ofstream(scope) << R"({"mesh": {"world_size": 2},
      "fully_shard": [{"module": "layers.*", "reshard_after_forward": 0}, "<root>"]})";
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--scope", scope}, 2,
                       scope + ": fully_shard[0].reshard_after_forward: expected true or false");
}

const std::vector<std::string> kConditionalUnits = {"--unit", "pre",   "--unit", "branch_*",
                                                    "--unit", "post",  "--unit", "refine",
                                                    "--unit", "<root>"};

RunResult plan_conditional(const std::string& out, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"plan", "tests/fixtures/conditional.pt", "--world-size", "2"};
  args.insert(args.end(), kConditionalUnits.begin(), kConditionalUnits.end());
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"-o", out});
  return mfsdp(args);
}

TEST(PlanCli, TraceInputPlansTheTracedPathAndRecordsTimes) {
  const std::string out = temp_path("traced.plan.json");
  // 3 rows: 3 % 3 = 0 turns of the loop over refine, so refine does not run.
  const RunResult r = plan_conditional(out, {"--trace-input", "3x8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("  trace        3x8 (differs from the static estimate in "
                       "units.call_count, forward_order, backward_order)\n"),
            std::string::npos)
      << r.err;
  const auto plan = nlohmann::json::parse(read_file(out));
  const auto& order = plan["forward_order"];
  ASSERT_EQ(order.size(), 4u) << order;  // <root>, pre, the branch taken, post
  EXPECT_EQ(order[3], "post");
  EXPECT_TRUE(order[2] == "branch_a" || order[2] == "branch_b") << order;
  EXPECT_EQ(plan["trace"]["inputs"], std::vector<std::string>{"3x8"});
  ASSERT_EQ(plan["trace"]["times"].size(), order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& time = plan["trace"]["times"][i];
    EXPECT_EQ(time["unit"], order[i]);
    EXPECT_GE(time["forward_ms"].get<double>(), 0.0);
    EXPECT_GE(time["backward_ms"].get<double>(), 0.0);
  }
  const RunResult valid = mfsdp({"validate", out, "--model", "tests/fixtures/conditional.pt"});
  EXPECT_EQ(valid.exit_code, 0) << valid.out << valid.err;
}

TEST(PlanCli, DiffIgnoresTraceTimesUnlessIncluded) {
  const std::string a = temp_path("traced_a.plan.json"), b = temp_path("traced_b.plan.json");
  ASSERT_EQ(plan_conditional(a, {"--trace-input", "4x8", "-q"}).exit_code, 0);
  ASSERT_EQ(plan_conditional(b, {"--trace-input", "4x8", "-q"}).exit_code, 0);
  const RunResult same = mfsdp({"diff", a, b});
  EXPECT_EQ(same.exit_code, 0) << same.out;
  EXPECT_EQ(same.out, "");
  // Measured times may differ between two runs; nothing else may.
  const RunResult timed = mfsdp({"diff", a, b, "--include", "trace.times", "--format", "json"});
  const auto doc = nlohmann::json::parse(timed.out);
  EXPECT_EQ(doc["ignored"], (std::vector<std::string>{"generator", "model.path", "model.sha256"}));
  for (const auto& field : doc["fields"]) {
    EXPECT_EQ(field["field"].get<std::string>().rfind("trace.times", 0), 0u) << field;
  }

  const std::string untraced = temp_path("untraced.plan.json");
  ASSERT_EQ(plan_conditional(untraced, {"-q"}).exit_code, 0);
  const RunResult traced = mfsdp({"diff", untraced, a, "--color", "never"});
  EXPECT_EQ(traced.exit_code, 1);
  EXPECT_NE(traced.out.find("trace changed"), std::string::npos) << traced.out;
  EXPECT_NE(traced.out.find("Trace\n  ~ inputs null → [4x8]\n"), std::string::npos) << traced.out;
  const RunResult listed = mfsdp({"diff", untraced, a, "--format", "json"});
  EXPECT_EQ(nlohmann::json::parse(listed.out)["ignored"],
            (std::vector<std::string>{"generator", "model.path", "model.sha256", "trace.times"}));
}

TEST(PlanCli, TraceInputErrors) {
  // A malformed spec is refused before the model is loaded (the path does not exist).
  expect_clean_failure({"missing.pt", "--world-size", "2", "--auto", "--trace-input", "2x"}, 2,
                       "--trace-input '2x': dimension 2 is empty; expected SHAPE[:DTYPE] such as "
                       "2x64:int64 or 8x3x32x32");
  const std::vector<std::string> reordered = {"tests/fixtures/reordered.pt",
                                              "--world-size",
                                              "2",
                                              "--unit",
                                              "stem",
                                              "--unit",
                                              "blocks.*",
                                              "--unit",
                                              "head"};
  std::vector<std::string> too_many = reordered;
  too_many.insert(too_many.end(), {"--trace-input", "4x8", "--trace-input", "4x8"});
  expect_clean_failure(too_many, 2,
                       "tests/fixtures/reordered.pt: forward takes 1 argument(s) (x), but 2 "
                       "--trace-input were given; give one per forward argument, in order");
  std::vector<std::string> wrong_shape = reordered;
  wrong_shape.insert(wrong_shape.end(), {"--trace-input", "4x7"});
  // LibTorch 2.x puts the operator's name ("addmm: ") before the interpreter's message.
  expect_clean_failure(wrong_shape, 3,
                       "tests/fixtures/reordered.pt: the traced step on --trace-input 4x7 failed "
                       "in forward: ");
  expect_clean_failure(wrong_shape, 3, "mat1 and mat2 shapes cannot be multiplied");
}

TEST(PlanCli, TraceInputTooLargeForMemoryIsAUsageErrorNotAnInternalOne) {
  // 10^10 int64 zeros (80 GB): LibTorch's allocation failure used to exit with 70.
  expect_clean_failure(
      {"missing.pt", "--world-size", "2", "--auto", "--trace-input", "100000x100000:int64"}, 2,
      "--trace-input '100000x100000:int64' is 80000000000 bytes; an example input "
      "holds at most 1073741824 bytes (1 GiB), so trace with a smaller batch");
}

TEST(PlanCli, TraceInputThatCannotBeAllocatedNamesTheInput) {
  // 1 GiB is within the limit but not within 1 GB of address space; LibTorch itself fits.
  const auto in_one_gb = [](const std::string& trace) {
    return run_program("/bin/sh",
                       {"-c",
                        "ulimit -v 1000000 && exec \"$0\" plan examples/bytegpt.pt --world-size 2 "
                        "--unit '<root>' " +
                            trace + " -o \"$1\"",
                        MFSDP_BINARY, temp_path("trace_no_memory.plan.json")},
                       kRepo);
  };
  // Whether this LibTorch starts at all in 1 GB is asked apart, by the same plan untraced, so
  // that a regression in the traced one (an uncaught bad_alloc) cannot pass for a skip.
  const RunResult untraced = in_one_gb("-q");
  if (untraced.exit_code != 0) {
    GTEST_SKIP() << "this LibTorch does not plan in 1 GB of address space: " << untraced.err;
  }
  const RunResult r = in_one_gb("--trace-input 8192x16384:int64");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err,
            "mfsdp: error: --trace-input '8192x16384:int64': cannot allocate its example tensor "
            "of 1073741824 bytes (out of memory); trace with a smaller batch\n");
}

TEST(PlanCli, ScopeAndTrainingFilesWithANulByteAndGarbageAreRefused) {
  const std::string scope = "tests/fixtures/bad/nul_after_scope.scope.json";
  expect_clean_failure({"missing.pt", "--scope", scope}, 2,
                       scope +
                           ": not valid JSON: trailing content after the JSON document: a NUL "
                           "byte at byte offset 55 (line 2 column 1)");
  const std::string training = temp_path("plan_nul_training.json");
  std::ofstream(training, std::ios::binary) << std::string("{\"steps\": 10}\0garbage", 21);
  expect_clean_failure({"tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit", "<root>",
                        "--training", training},
                       2,
                       training +
                           ": not valid JSON: trailing content after the JSON document: a "
                           "NUL byte at byte offset 13 (line 1 column 14)");
}

TEST(PlanCli, UnwritableOutputIsAnIoError) {
  const RunResult r = mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--auto",
                             "-o", "/nonexistent/dir/plan.json"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
}

TEST(PlanCli, TrainingFileIsWrittenIntoThePlanAndSummarised) {
  const std::string training = temp_path("plan_training.json");
  std::ofstream(training) << R"({"lr": 0.0003, "steps": 100, "betas": [0.9, 0.95]})";
  const std::string out = temp_path("plan_training.plan.json");
  const RunResult r = mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit",
                             "layers.*", "--unit", "<root>", "--training", training, "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("  training     {\"steps\":100,\"lr\":0.0003,\"betas\":[0.9,0.95]}\n"),
            std::string::npos)
      << r.err;
  const auto plan = nlohmann::json::parse(read_file(out));
  EXPECT_EQ(plan.at("training"),
            nlohmann::json::parse(R"({"steps": 100, "lr": 0.0003, "betas": [0.9, 0.95]})"));
  const RunResult valid = mfsdp({"validate", out});
  EXPECT_EQ(valid.exit_code, 0) << valid.out << valid.err;
}

TEST(PlanCli, BadTrainingFileIsOneUsageLineAndWritesNothing) {
  const std::string training = temp_path("plan_bad_training.json");
  std::ofstream(training) << R"({"steps": 10, "lr_schedule": "linear"})";
  const std::string out = temp_path("plan_bad_training.plan.json");
  std::remove(out.c_str());
  const RunResult r = mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "2", "--unit",
                             "layers.*", "--unit", "<root>", "--training", training, "-o", out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(training + ": lr_schedule: is 'linear'; expected one of ['constant', "
                                  "'cosine']"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::ifstream(out).good());
}

}  // namespace
}  // namespace mfsdp::testing
