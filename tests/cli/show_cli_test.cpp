// `mfsdp show` as a user runs it: the real binary in a subprocess, from the repository root.
#include <cstdlib>
#include <fstream>
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

size_t count(const std::string& text, const std::string& piece) {
  size_t n = 0;
  for (size_t at = text.find(piece); at != std::string::npos; at = text.find(piece, at + 1)) ++n;
  return n;
}

std::vector<std::string> golden_names() {
  std::ifstream list(kRepo + "/plans/golden.list");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(list, line)) {
    if (line.empty() || line[0] == '#') continue;
    out.push_back(line.substr(0, line.find(' ')));
  }
  return out;
}

std::vector<std::string> keys(const nlohmann::ordered_json& object) {
  std::vector<std::string> out;
  for (auto it = object.begin(); it != object.end(); ++it) out.push_back(it.key());
  return out;
}

TEST(ShowCli, TextHasUnitsOrdersScheduleAndPeak) {
  const RunResult r = mfsdp({"show", "plans/tied_lm.plan.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string& out = r.out;
  EXPECT_TRUE(has_line(out, "mesh             world 2 = shard 2 x replicate 1")) << out;
  EXPECT_TRUE(has_line(out, "  name        type     params      full  per rank  calls  flags"));
  EXPECT_TRUE(has_line(out, "  <root>      TinyGPT       4  40.2 KiB  20.1 KiB      1  root kept"));
  EXPECT_TRUE(has_line(out, "    layers.0  Block        12  49.6 KiB  24.8 KiB      1"));
  EXPECT_TRUE(has_line(out, "forward          <root> > layers.0 > layers.1"));
  EXPECT_TRUE(has_line(out, "backward         <root> > layers.1 > layers.0"));
  EXPECT_TRUE(has_line(out,
                       "  pre_forward      layers.0  live 139.5 KiB  gather+ layers.1  wait "
                       "layers.0  (in flight: layers.1)"));
  EXPECT_TRUE(has_line(out,
                       "  post_backward    layers.1  live 139.5 KiB  reshard layers.1  "
                       "reduce-scatter layers.1  (in flight: layers.0)"));
  EXPECT_TRUE(has_line(out, "  peak           139.5 KiB gathered at pre_forward layers.0"));
  EXPECT_TRUE(has_line(out, "    slot 1       49.6 KiB  layers.0"));
  EXPECT_TRUE(has_line(out, "  all-gather     238.8 KiB in 5 calls"));
  EXPECT_TRUE(has_line(out, "diagnostics      0"));
}

TEST(ShowCli, FlagsRepeatedCallsHsdpAndDiagnosticsAreShown) {
  RunResult r = mfsdp({"show", "plans/conditional.plan.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has_line(r.out,
                       "    branch_a  SmallMLP          4  4.2 KiB   2.1 KiB      1  "
                       "conditional"))
      << r.out;
  EXPECT_TRUE(has_line(r.out,
                       "    refine    Linear            2  1.1 KiB     544 B      1  kept "
                       "repeated"));
  EXPECT_NE(r.out.find("\n  warning unit.in_loop [refine]: unit refine is called inside"),
            std::string::npos);
  r = mfsdp({"show", "plans/mixed.plan.json"});
  EXPECT_NE(r.out.find("    embed   Embedding         1  528 B     176 B      1  frozen\n"),
            std::string::npos)
      << r.out;
  r = mfsdp({"show", "plans/called_twice.plan.json"});
  EXPECT_TRUE(has_line(r.out,
                       "  post_forward     shared#1  live 4.5 KiB  reshard shared  (in "
                       "flight: out)"))
      << r.out;
  r = mfsdp({"show", "plans/tied_lm_hsdp.plan.json"});
  EXPECT_TRUE(has_line(r.out,
                       "  all-reduce     69.8 KiB across 2 replicas, once per optimizer "
                       "step"))
      << r.out;
}

TEST(ShowCli, EveryGoldenPlanIsShownInEveryFormat) {
  for (const std::string& name : golden_names()) {
    for (const char* format : {"text", "json", "dot"}) {
      const RunResult r = mfsdp({"show", "plans/" + name + ".plan.json", "--format", format});
      EXPECT_EQ(r.exit_code, 0) << name << " " << format << ": " << r.err;
      EXPECT_FALSE(r.out.empty());
    }
  }
}

TEST(ShowCli, JsonHasStableKeys) {
  const RunResult r = mfsdp({"show", "plans/called_twice.plan.json", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Parsed keeping key order: the order is part of the format.
  const auto report = nlohmann::ordered_json::parse(r.out);
  EXPECT_EQ(keys(report),
            (std::vector<std::string>{"file", "schema", "generator", "model", "mesh", "policy",
                                      "units", "roots", "forward_order", "backward_order",
                                      "schedule", "memory", "communication", "diagnostics"}));
  EXPECT_EQ(keys(report["units"][0]),
            (std::vector<std::string>{"name", "type", "class", "parent", "depth", "param_count",
                                      "unsharded_bytes", "sharded_bytes", "call_count", "flags"}));
  EXPECT_EQ(report["units"][2], nlohmann::ordered_json::parse(R"({"name": "shared",
      "type": "__torch__.fixtures.SmallMLP", "class": "SmallMLP", "parent": "<root>", "depth": 1,
      "param_count": 4, "unsharded_bytes": 4288, "sharded_bytes": 2144, "call_count": 2,
      "flags": []})"));
  EXPECT_EQ(report["schedule"][3],
            nlohmann::ordered_json::parse(R"({"point": "pre_forward", "unit": "shared",
      "call": 0, "all_gather": ["mid"], "wait": ["shared"], "reshard": [], "reduce_scatter": [],
      "in_flight": ["mid"], "unsharded_bytes": 5376})"));
  EXPECT_EQ(report["schedule"].back()["unit"], nullptr);
  EXPECT_EQ(keys(report["memory"]),
            (std::vector<std::string>{"sharded_param_bytes", "sharded_grad_bytes",
                                      "peak_unsharded_bytes", "peak_at", "slot_bytes", "slots"}));
  EXPECT_EQ(keys(report["diagnostics"]),
            (std::vector<std::string>{"info", "warning", "error", "items"}));
  EXPECT_EQ(report["diagnostics"]["info"], 2);
}

TEST(ShowCli, DotIsADigraphWithOneNodePerUnit) {
  for (const char* name : {"tied_lm", "conditional", "two_roots"}) {
    const std::string file = "plans/" + std::string(name) + ".plan.json";
    const json plan = json::parse(read_file(kRepo + "/" + file));
    const RunResult r = mfsdp({"show", file, "--format", "dot"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("digraph plan {\n", 0), 0u) << r.out;
    EXPECT_EQ(r.out.substr(r.out.size() - 2), "}\n");
    EXPECT_EQ(count(r.out, " [label="), plan["units"].size()) << r.out;
    size_t children = 0;
    for (const auto& unit : plan["units"]) children += !unit["parent"].is_null();
    EXPECT_EQ(count(r.out, "\";\n"), children) << r.out;
    EXPECT_EQ(count(r.out, "[style=dashed"), plan["forward_order"].size() - 1) << r.out;
  }
  const RunResult r = mfsdp({"show", "plans/tied_lm.plan.json", "--format", "dot"});
  EXPECT_TRUE(has_line(r.out, R"(  "<root>" [label="<root>\nTinyGPT, 4 params\n40.2 KiB full, )"
                              R"(20.1 KiB per rank\nroot kept"];)"))
      << r.out;
  EXPECT_TRUE(has_line(r.out, R"(  "<root>" -> "layers.1";)"));
  EXPECT_TRUE(has_line(
      r.out, R"(  "layers.0" -> "layers.1" [style=dashed, color=gray40, constraint=false];)"));
}

TEST(ShowCli, RefusesAnInvalidPlanListingItsProblems) {
  json plan = json::parse(read_file(kRepo + "/plans/tied_lm.plan.json"));
  plan["mesh"]["world_size"] = 3;
  const std::string file = ::testing::TempDir() + "/show_invalid.plan.json";
  std::ofstream(file) << plan.dump();
  const RunResult r = mfsdp({"show", file});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, file + ": mesh.world_size: 3 is not shard_size 2 × replicate_size 1\n" +
                       "mfsdp: error: " + file +
                       " is invalid: 1 problem; show needs a valid plan (see mfsdp validate)\n");
}

TEST(ShowCli, UnusableInputExitsWith2) {
  const std::string file = ::testing::TempDir() + "/show_text.plan.json";
  std::ofstream(file) << "plan?";
  const RunResult r = mfsdp({"show", file, "--format", "json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("mfsdp: error: " + file + ": not valid JSON", 0), 0u) << r.err;
  EXPECT_EQ(mfsdp({"show", "plans/tied_lm.plan.json", "--format", "svg"}).exit_code, 2);
}

TEST(ShowCli, RunsWithoutLibTorch) {
  setenv("MFSDP_TORCH_BINARY", "/nonexistent", 1);
  const RunResult r = mfsdp({"show", "plans/tied_lm.plan.json", "--format", "dot"});
  unsetenv("MFSDP_TORCH_BINARY");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(ShowCli, HelpTeachesWithExamples) {
  const RunResult r = mfsdp({"show", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("mfsdp show gpt.plan.json --format dot | dot -Tsvg"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace mfsdp::testing
