// `mfsdp validate` as a user runs it: the real binary in a subprocess, from the repository root.
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_support.h"

namespace mfsdp::testing {
namespace {

using nlohmann::json;

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

struct Golden {
  std::string name;
  std::string model;
};

std::vector<Golden> golden_plans() {
  std::ifstream list(kRepo + "/plans/golden.list");
  std::vector<Golden> out;
  std::string line;
  while (std::getline(list, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    Golden golden;
    words >> golden.name >> golden.model;
    out.push_back(golden);
  }
  return out;
}

// A golden plan with one change, written to a temp file; returns its path.
std::string corrupted(const std::string& name, const std::function<void(json&)>& change) {
  json plan = json::parse(read_file(kRepo + "/plans/tied_lm.plan.json"));
  change(plan);
  const std::string path = temp_path(name);
  std::ofstream(path) << plan.dump(2);
  return path;
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Sets an environment variable for the subprocesses of one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(ValidateCli, EveryGoldenPlanIsValid) {
  const auto goldens = golden_plans();
  ASSERT_GE(goldens.size(), 10u);
  for (const Golden& golden : goldens) {
    const std::string file = "plans/" + golden.name + ".plan.json";
    const json plan = json::parse(read_file(kRepo + "/" + file));
    size_t params = 0;
    for (const auto& unit : plan["units"]) {
      for (const auto& group : unit["groups"]) params += group["params"].size();
    }
    const RunResult r = mfsdp({"validate", file});
    EXPECT_EQ(r.exit_code, 0) << file << ": " << r.out << r.err;
    EXPECT_EQ(r.out, file + ": valid (" + std::to_string(plan["units"].size()) + " units, " +
                         std::to_string(params) + " parameters)\n");
    EXPECT_EQ(r.err, "");
  }
}

TEST(ValidateCli, EveryGoldenPlanMatchesItsModel) {
  for (const Golden& golden : golden_plans()) {
    const std::string file = "plans/" + golden.name + ".plan.json";
    const RunResult r = mfsdp({"validate", file, "--model", golden.model});
    EXPECT_EQ(r.exit_code, 0) << file << ": " << r.out << r.err;
    EXPECT_NE(r.out.find("; matches " + golden.model + ")\n"), std::string::npos) << r.out;
  }
}

TEST(ValidateCli, QuietPrintsNothingForAValidPlan) {
  const RunResult r = mfsdp({"validate", "plans/tied_lm.plan.json", "--quiet"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out + r.err, "");
}

TEST(ValidateCli, RuleViolationsAreListedOnePerLineWithTheirJsonPath) {
  const std::string file =
      corrupted("world.plan.json", [](json& p) { p["mesh"]["world_size"] = 3; });
  const RunResult r = mfsdp({"validate", file});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, file + ": mesh.world_size: 3 is not shard_size 2 × replicate_size 1\n");
  EXPECT_EQ(r.err, "mfsdp: error: " + file + " is invalid: 1 problem\n");
}

TEST(ValidateCli, LayoutArithmeticIsChecked) {
  const std::string file = corrupted(
      "padded.plan.json", [](json& p) { p["units"][1]["groups"][0]["padded_numel"] = 12705; });
  const RunResult r = mfsdp({"validate", file});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has_line(r.out, file + ": units[1].groups[0].padded_numel: 12705 is not divisible by "
                                     "shard size 2 × alignment 4 elements"))
      << r.out;
  EXPECT_EQ(r.err, "mfsdp: error: " + file + " is invalid: 4 problems\n");
}

TEST(ValidateCli, OrdersAndMemoryAreChecked) {
  const std::string order =
      corrupted("order.plan.json", [](json& p) { p["forward_order"][2] = "layers.9"; });
  RunResult r = mfsdp({"validate", order});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, order + ": forward_order[2]: 'layers.9' is not a unit\n" + order +
                       ": forward_order: misses 'layers.1', which is called 1 time(s)\n");
  const std::string peak = corrupted("peak.plan.json", [](json& p) {
    p["memory"]["peak_unsharded_bytes"] = p["memory"]["peak_unsharded_bytes"].get<int>() + 1;
  });
  r = mfsdp({"validate", peak});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, peak +
                       ": memory.peak_unsharded_bytes: is 142849, expected 142848 (the largest "
                       "schedule[].unsharded_bytes)\n");
}

TEST(ValidateCli, WrongTypesUnknownFieldsAndHugeIntegersAreShapeProblems) {
  const std::string file = corrupted("types.plan.json", [](json& p) {
    p["units"][0]["call_count"] = "one";
    p["units"][0]["colour"] = "red";
    p["memory"]["slot_bytes"] = std::numeric_limits<uint64_t>::max();
  });
  const RunResult r = mfsdp({"validate", file});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, file + ": units[0].call_count: expected an integer, got a string\n" + file +
                       ": units[0].colour: unknown field\n" + file +
                       ": memory.slot_bytes: integer out of range: must fit in 64 bits (signed)\n");
  EXPECT_EQ(r.err, "mfsdp: error: " + file +
                       " is invalid: 3 problems in its shape; the rules are checked once it has "
                       "the plan's shape\n");
}

TEST(ValidateCli, DeeplyNestedJunkInAFieldIsAShapeProblem) {
  const std::string file = write_temp(
      "deep_field.plan.json", R"({"schema": "mfsdp.plan/1", "units": )" + std::string(100000, '[') +
                                  std::string(100000, ']') + "}");
  const RunResult r = mfsdp({"validate", file});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has_line(r.out, file + ": units[0]: expected an object, got an array")) << r.out;
  EXPECT_EQ(lines(r.err), 1u);
}

// Not a plan at all: exit 2, nothing on stdout, one line on stderr that says what is wrong.
void expect_unusable(const std::string& file, const std::string& message) {
  for (const char* format : {"text", "json"}) {
    const RunResult r = mfsdp({"validate", file, "--format", format});
    EXPECT_EQ(r.exit_code, 2) << file << ": " << r.err;
    EXPECT_EQ(r.out, "") << file;
    EXPECT_EQ(r.err, "mfsdp: error: " + file + ": " + message + "\n");
  }
}

TEST(ValidateCli, UnusableInputsExitWith2AndOneLine) {
  expect_unusable(temp_path("missing.plan.json"), "cannot read: No such file or directory");
  expect_unusable(write_temp("empty.plan.json", ""), "empty file, expected a JSON plan (0 bytes)");
  expect_unusable(write_temp("text.plan.json", "not json\n"),
                  "not valid JSON: syntax error while parsing value - invalid literal (line 1 "
                  "column 2); a plan is the JSON file that mfsdp plan writes");
  const std::string golden = read_file(kRepo + "/plans/tied_lm.plan.json");
  expect_unusable(write_temp("truncated.plan.json", golden.substr(0, 3000)),
                  "not valid JSON: syntax error while parsing object key - unexpected end of "
                  "input; expected string literal (line 120 column 10)");
  expect_unusable(write_temp("huge.plan.json", R"({"schema": 1e400})"),
                  "not valid JSON: number overflow parsing '1e400' (line 1 column 16)");
  expect_unusable(
      write_temp("deep.plan.json", std::string(200000, '[') + std::string(200000, ']')),
      "not an mfsdp plan: expected a JSON object, got an array; this mfsdp reads: mfsdp.plan/1");
  expect_unusable(corrupted("v2.plan.json", [](json& p) { p["schema"] = "mfsdp.plan/2"; }),
                  "unsupported plan schema 'mfsdp.plan/2'; this mfsdp reads: mfsdp.plan/1");
  expect_unusable(corrupted("noschema.plan.json", [](json& p) { p.erase("schema"); }),
                  "not an mfsdp plan: it has no \"schema\" field; this mfsdp reads: mfsdp.plan/1");
}

TEST(ValidateCli, ANulByteAndGarbageAfterThePlanExitWith2NamingTheOffset) {
  // nlohmann's parser stops at a NUL as if the input ended there: the plan read as valid.
  expect_unusable("tests/fixtures/bad/nul_after_plan.plan.json",
                  "not valid JSON: trailing content after the JSON document: a NUL byte at byte "
                  "offset 6411 (line 275 column 1); a JSON file holds one document, so remove "
                  "what follows it");
  const std::string golden = read_file(kRepo + "/plans/tied_lm.plan.json");
  expect_unusable(write_temp("two_plans.plan.json", golden + golden),
                  "not valid JSON: trailing content after the JSON document at byte offset " +
                      std::to_string(golden.size()) + " (line " +
                      std::to_string(lines(golden) + 1) +
                      " column 1); a JSON file holds one document, so remove what follows it");
}

TEST(ValidateCli, SizesBeyondWhatAPlanHoldsAreShapeProblems) {
  const RunResult world = mfsdp({"validate", "tests/fixtures/bad/huge_world_size.plan.json"});
  EXPECT_EQ(world.exit_code, 1) << world.err;
  EXPECT_TRUE(has_line(world.out,
                       "tests/fixtures/bad/huge_world_size.plan.json: mesh.world_size: must be <= "
                       "2147483647, got 4611686018427387904"))
      << world.out;
  const RunResult memory = mfsdp({"validate", "tests/fixtures/bad/memory_overflow.plan.json"});
  EXPECT_EQ(memory.exit_code, 1) << memory.err;
  EXPECT_EQ(memory.out,
            "tests/fixtures/bad/memory_overflow.plan.json: memory: the memory per rank "
            "(sharded_param_bytes + sharded_grad_bytes + slot_bytes) adds up to more than "
            "9223372036854775807 bytes, the most a plan can hold\n");
}

TEST(ValidateCli, JsonReportListsEveryProblem) {
  const std::string file =
      corrupted("json.plan.json", [](json& p) { p["mesh"]["world_size"] = 3; });
  RunResult r = mfsdp({"validate", file, "--format", "json"});
  EXPECT_EQ(r.exit_code, 1);
  const json report = json::parse(r.out);
  EXPECT_EQ(report, json::parse(R"({"file": ")" + file + R"(", "valid": false,
      "schema": "mfsdp.plan/1", "units": 3, "parameters": 28, "model": null,
      "checks": ["shape", "rules"],
      "problems": [{"check": "rules", "path": "mesh.world_size",
                    "message": "3 is not shard_size 2 × replicate_size 1"}]})"));
  r = mfsdp({"validate", "plans/tied_lm.plan.json", "--format", "json", "--quiet"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(json::parse(r.out)["valid"], true);
  EXPECT_EQ(json::parse(r.out)["problems"], json::array());
}

TEST(ValidateCli, TiedPlanAgainstUntiedModelListsTheMismatches) {
  const RunResult r =
      mfsdp({"validate", "plans/tied_lm.plan.json", "--model", "tests/fixtures/untied_lm.pt"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(
      r.out,
      "plans/tied_lm.plan.json: model.structural_hash: is "
      "bb09dd28c1ff6122a3219c15880e58cb7ff54d2f1a2d4c7905f823c9a3f9dec4, but the model in "
      "tests/fixtures/untied_lm.pt hashes to "
      "9df348ce562c571347427fc80e4c3fa133cec0423e7af22843a5fcf5d6784a6f: the plan was made for a "
      "model of another structure\n"
      "plans/tied_lm.plan.json: units[0].groups[0].params[0].aliases[0]: 'lm_head.weight' is a "
      "tensor of its own in tests/fixtures/untied_lm.pt, not tied to 'wte.weight'\n");
  EXPECT_EQ(r.err, "mfsdp: error: plans/tied_lm.plan.json is invalid: 2 problems\n");
}

TEST(ValidateCli, UntiedPlanAgainstTiedModelListsTheMismatches) {
  const RunResult r =
      mfsdp({"validate", "plans/untied_lm.plan.json", "--model", "tests/fixtures/tied_lm.pt"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has_line(r.out,
                       "plans/untied_lm.plan.json: units[0].groups[0].params[0].aliases: misses "
                       "'lm_head.weight', which in tests/fixtures/tied_lm.pt is the same tensor "
                       "as 'wte.weight' (tied)"))
      << r.out;
  EXPECT_TRUE(has_line(r.out,
                       "plans/untied_lm.plan.json: units[0].groups[0].params[4].name: "
                       "'lm_head.weight' and 'wte.weight' are one tensor (tied) in "
                       "tests/fixtures/tied_lm.pt, but the plan has them as two parameters"))
      << r.out;
}

TEST(ValidateCli, ModelMismatchesShowTheFirst20ThenACount) {
  const RunResult r =
      mfsdp({"validate", "plans/bytegpt.plan.json", "--model=tests/fixtures/tied_lm.pt"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(lines(r.out), 21u) << r.out;
  EXPECT_TRUE(has_line(r.out,
                       "plans/bytegpt.plan.json: units[0].groups[0].params[0].shape: is [256, "
                       "64], but 'wte.weight' in tests/fixtures/tied_lm.pt is [256, 32]"))
      << r.out;
  EXPECT_TRUE(has_line(r.out,
                       "plans/bytegpt.plan.json: ... 35 more mismatches with "
                       "tests/fixtures/tied_lm.pt (--format json lists all)"))
      << r.out;
  EXPECT_EQ(r.err, "mfsdp: error: plans/bytegpt.plan.json is invalid: 55 problems\n");
  const RunResult j = mfsdp({"validate", "plans/bytegpt.plan.json", "--model",
                             "tests/fixtures/tied_lm.pt", "--format", "json"});
  const json report = json::parse(j.out);
  EXPECT_EQ(report["problems"].size(), 55u);
  EXPECT_EQ(report["checks"], json::parse(R"(["shape", "rules", "model"])"));
}

TEST(ValidateCli, ModelsThatCannotBeLoadedExitWith3) {
  RunResult r = mfsdp({"validate", "plans/tied_lm.plan.json", "--model", "missing.pt"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "mfsdp: error: missing.pt: cannot open the model file (does it exist?)\n");
  r = mfsdp({"validate", "plans/tied_lm.plan.json", "--model", "tests/fixtures/bad/truncated.pt"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
}

TEST(ValidateCli, ReadsPlansWithoutLibTorch) {
  ScopedEnv no_torch("MFSDP_TORCH_BINARY", "/nonexistent");
  RunResult r = mfsdp({"validate", "plans/tied_lm.plan.json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = mfsdp({"validate", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = mfsdp({"validate", "plans/tied_lm.plan.json", "--model", "tests/fixtures/tied_lm.pt"});
  EXPECT_EQ(r.exit_code, 70);
  EXPECT_EQ(r.err.rfind("mfsdp: internal error: cannot run /nonexistent", 0), 0u) << r.err;
}

TEST(ValidateCli, HelpTeachesWithExamples) {
  const RunResult r = mfsdp({"validate", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("mfsdp validate gpt.plan.json --model gpt.pt"), std::string::npos);
  EXPECT_NE(r.out.find("Exit codes: 0 valid, 1 invalid"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mfsdp::testing
