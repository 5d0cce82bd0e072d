// plan_to_json / dump_plan / parse_plan: byte-exact writing and strict, path-qualified reading.

#include "schema/plan_json.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sample_plan.h"
#include "schema/error.h"

namespace mfsdp::schema {
namespace {

using nlohmann::json;
using Lines = std::vector<std::string>;

json sample_doc() {
  return json::parse(dump_plan(sample_plan()));
}

Lines parse_problems(const json& doc) {
  return problem_lines(parse_plan(doc).problems);
}

std::string deep_array(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

std::vector<std::string> keys(const nlohmann::ordered_json& object) {
  std::vector<std::string> names;
  for (auto it = object.begin(); it != object.end(); ++it) names.push_back(it.key());
  return names;
}

TEST(PlanJson, RoundTripGivesIdenticalBytes) {
  const std::string text = dump_plan(sample_plan());
  const ParseResult parsed = parse_plan(json::parse(text));
  EXPECT_EQ(problem_lines(parsed.problems), Lines{});
  EXPECT_EQ(dump_plan(parsed.plan), text);
}

// `checkpoint` is written only when true, so plans without checkpointing keep their bytes.
TEST(PlanJson, CheckpointIsWrittenOnlyWhenTrueAndReadBack) {
  Plan plan = sample_plan();
  EXPECT_FALSE(sample_doc()["units"][1].contains("checkpoint"));
  plan.units[1].checkpoint = true;
  const std::string text = dump_plan(plan);
  const json doc = json::parse(text);
  EXPECT_EQ(doc["units"][1]["checkpoint"], true);
  EXPECT_FALSE(doc["units"][0].contains("checkpoint"));
  const ParseResult parsed = parse_plan(doc);
  EXPECT_EQ(problem_lines(parsed.problems), Lines{});
  EXPECT_TRUE(parsed.plan.units[1].checkpoint);
  EXPECT_FALSE(parsed.plan.units[0].checkpoint);
  EXPECT_EQ(dump_plan(parsed.plan), text);
  json wrong = doc;
  wrong["units"][1]["checkpoint"] = 1;
  EXPECT_EQ(parse_problems(wrong),
            Lines{"units[1].checkpoint: expected a boolean, got an integer"});
}

// The bytes of sample_plan() as reviewed and committed in tests/schema/sample_plan.json: a
// change to how plans are written (key order, number format, indentation, a field) shows up
// here and in that file's diff, instead of passing unseen. After a deliberate change, run this
// test with MFSDP_WRITE_GOLDEN=1 to rewrite the file (the run fails, saying so), review the
// diff and commit it.
TEST(PlanJson, DumpIsTheReviewedGoldenText) {
  const std::string path = std::string(MFSDP_SOURCE_DIR) + "/tests/schema/sample_plan.json";
  const std::string text = dump_plan(sample_plan());
  const char* write = std::getenv("MFSDP_WRITE_GOLDEN");
  if (write != nullptr && std::string(write) == "1") {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    FAIL() << "wrote " << path << "; review its diff and commit it";
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "cannot read " << path;
  const std::string golden((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, golden);
  // And not from anything that varies between runs or copies: a plan that went through a
  // copy and a round trip writes the same bytes.
  const Plan copy = parse_plan(json::parse(golden)).plan;
  EXPECT_EQ(dump_plan(copy), golden);
}

TEST(PlanJson, DumpIndentsTwoSpacesAndEndsWithNewline) {
  const std::string text = dump_plan(sample_plan());
  EXPECT_EQ(text.substr(0, 35), "{\n  \"schema\": \"mfsdp.plan/1\",\n  \"ge");
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.substr(text.size() - 6), "  ]\n}\n");
}

TEST(PlanJson, KeysFollowThePlanStructOrder) {
  const nlohmann::ordered_json j = plan_to_json(sample_plan());
  EXPECT_EQ(keys(j), (Lines{"schema", "generator", "model", "mesh", "policy", "streams", "units",
                            "roots", "forward_order", "backward_order", "schedule", "memory",
                            "communication", "diagnostics"}));
  EXPECT_EQ(keys(j["units"][0]),
            (Lines{"name", "type", "parent", "root", "call_count", "conditional", "repeated",
                   "kept_after_forward", "unsharded_bytes", "sharded_bytes", "groups", "buffers"}));
  EXPECT_EQ(keys(j["units"][0]["groups"][0]),
            (Lines{"dtype", "requires_grad", "numel", "padded_numel", "shard_numel", "params"}));
  EXPECT_EQ(keys(j["schedule"][0]), (Lines{"phase", "point", "unit", "call", "all_gather", "wait",
                                           "reshard", "reduce_scatter", "unsharded_bytes"}));
  EXPECT_EQ(j["mesh"].dump(), R"({"world_size":4,"shard_size":2,"replicate_size":2})");
  EXPECT_EQ(j["memory"]["slots"][1].dump(),
            R"({"index":1,"bytes":128,"units":["layers.0","layers.1"]})");
  EXPECT_EQ(j["units"][0]["groups"][1]["params"][0].dump(),
            R"({"name":"step","shape":[],"numel":1,"offset":0,"aliases":[]})");
}

TEST(PlanJson, EmptyOptionalsAreNull) {
  Plan plan = sample_plan();
  plan.policy.param_dtype.reset();
  const nlohmann::ordered_json j = plan_to_json(plan);
  EXPECT_TRUE(j["policy"]["param_dtype"].is_null());
  EXPECT_TRUE(j["units"][0]["parent"].is_null());
  EXPECT_EQ(j["units"][1]["parent"], "<root>");
  EXPECT_TRUE(j["schedule"][16]["unit"].is_null());
  const ParseResult parsed = parse_plan(json::parse(dump_plan(plan)));
  EXPECT_EQ(problem_lines(parsed.problems), Lines{});
  EXPECT_FALSE(parsed.plan.policy.param_dtype.has_value());
  EXPECT_FALSE(parsed.plan.units[0].parent.has_value());
}

TEST(PlanJson, ReportsWrongTypeWithItsPath) {
  json doc = sample_doc();
  doc["units"][2]["groups"][0]["padded_numel"] = "64";
  doc["units"][1]["root"] = 0;
  doc["roots"][0] = nullptr;
  EXPECT_EQ(parse_problems(doc),
            (Lines{"units[1].root: expected a boolean, got an integer",
                   "units[2].groups[0].padded_numel: expected an integer, got a string",
                   "roots[0]: expected a string, got null"}));
}

TEST(PlanJson, ReportsWrongContainerTypes) {
  json doc = sample_doc();
  doc["units"][0] = 5;
  doc["memory"] = json::array();
  doc["diagnostics"] = json::object();
  EXPECT_EQ(parse_problems(doc), (Lines{"units[0]: expected an object, got an integer",
                                        "memory: expected an object, got an array",
                                        "diagnostics: expected an array, got an object"}));
}

TEST(PlanJson, NullIsOnlyAllowedForOptionalFields) {
  json doc = sample_doc();
  doc["generator"] = nullptr;
  doc["units"][1]["parent"] = nullptr;  // allowed by parse; check_plan judges it
  doc["units"][1]["type"] = nullptr;
  doc["schedule"][3]["unit"] = 7;
  EXPECT_EQ(parse_problems(doc), (Lines{"generator: expected a string, got null",
                                        "units[1].type: expected a string, got null",
                                        "schedule[3].unit: expected a string or null, got an "
                                        "integer"}));
}

TEST(PlanJson, ReportsMissingField) {
  json doc = sample_doc();
  doc["units"][1].erase("call_count");
  doc["policy"].erase("param_dtype");  // optional, but the key must be present
  doc.erase("diagnostics");
  EXPECT_EQ(parse_problems(doc),
            (Lines{"policy.param_dtype: missing field", "units[1].call_count: missing field",
                   "diagnostics: missing field"}));
}

TEST(PlanJson, ReportsUnknownField) {
  json doc = sample_doc();
  doc["policy"]["colour"] = "blue";
  doc["schedule"][0]["note\nwith newline"] = 1;
  doc["extra"] = json::array();
  EXPECT_EQ(parse_problems(doc),
            (Lines{"policy.colour: unknown field",
                   "schedule[0][\"note\\nwith newline\"]: unknown field", "extra: unknown field"}));
}

TEST(PlanJson, RejectsFloatsWhereIntegersAreExpected) {
  json doc = sample_doc();
  doc["mesh"]["world_size"] = 4.0;
  doc["units"][0]["groups"][0]["params"][0]["shape"][1] = 4.5;
  EXPECT_EQ(parse_problems(doc),
            (Lines{"mesh.world_size: expected an integer, got the floating-point number 4.0",
                   "units[0].groups[0].params[0].shape[1]: expected an integer, got the "
                   "floating-point number 4.5"}));
}

TEST(PlanJson, RejectsIntegersBeyond64Bits) {
  json doc = sample_doc();
  // 2^70 and 2^64 - 1 as written in a file; the parser turns the first into a double.
  doc["model"]["modules"] = json::parse("1180591620717411303424");
  doc["model"]["parameters"] = json::parse("18446744073709551615");
  doc["model"]["parameter_numel"] = json::parse("-1180591620717411303424");
  doc["memory"]["slot_bytes"] = HUGE_VAL;  // what 1e400 would be, had the parser allowed it
  const std::string out_of_range = ": integer out of range: must fit in 64 bits (signed)";
  EXPECT_EQ(parse_problems(doc),
            (Lines{"model.modules" + out_of_range, "model.parameters" + out_of_range,
                   "model.parameter_numel" + out_of_range, "memory.slot_bytes" + out_of_range}));
}

TEST(PlanJson, AcceptsLargestInt64) {
  json doc = sample_doc();
  doc["model"]["modules"] = json::parse("9223372036854775807");
  const ParseResult parsed = parse_plan(doc);
  EXPECT_EQ(problem_lines(parsed.problems), Lines{});
  EXPECT_EQ(parsed.plan.model.modules, INT64_MAX);
}

TEST(PlanJson, RejectsNegativeCountsAndEmptyMesh) {
  json doc = sample_doc();
  doc["units"][0]["call_count"] = -1;
  doc["schedule"][2]["unsharded_bytes"] = -160;
  doc["mesh"]["shard_size"] = 0;
  doc["policy"]["align_bytes"] = 0;
  EXPECT_EQ(parse_problems(doc), (Lines{"mesh.shard_size: must be >= 1, got 0",
                                        "policy.align_bytes: must be >= 1, got 0",
                                        "units[0].call_count: must be >= 0, got -1",
                                        "schedule[2].unsharded_bytes: must be >= 0, got -160"}));
}

TEST(PlanJson, RejectsMeshSizesBeyond32BitRanksAndAlignmentsBeyondOneGiB) {
  json doc = sample_doc();
  doc["mesh"]["world_size"] = int64_t{1} << 62;
  doc["mesh"]["shard_size"] = int64_t{1} << 31;
  doc["mesh"]["replicate_size"] = INT64_MAX;
  doc["policy"]["align_bytes"] = int64_t{1} << 31;
  EXPECT_EQ(parse_problems(doc),
            (Lines{"mesh.world_size: must be <= 2147483647, got 4611686018427387904",
                   "mesh.shard_size: must be <= 2147483647, got 2147483648",
                   "mesh.replicate_size: must be <= 2147483647, got 9223372036854775807",
                   "policy.align_bytes: must be <= 1073741824, got 2147483648"}));
  doc = sample_doc();
  doc["mesh"] = {{"world_size", 2147483647}, {"shard_size", 2147483647}, {"replicate_size", 1}};
  doc["policy"]["align_bytes"] = 1073741824;
  EXPECT_EQ(parse_problems(doc), Lines{});
}

TEST(PlanJson, RejectsSizesWhoseSumsReadersFormOverflow) {
  const std::string too_large =
      " adds up to more than 9223372036854775807 bytes, the most a "
      "plan can hold";
  json doc = sample_doc();
  doc["memory"]["sharded_param_bytes"] = int64_t{1} << 62;
  doc["memory"]["sharded_grad_bytes"] = int64_t{1} << 62;
  doc["communication"]["all_gather_bytes"] = INT64_MAX;
  EXPECT_EQ(parse_problems(doc),
            (Lines{"memory: the memory per rank (sharded_param_bytes + sharded_grad_bytes + "
                   "slot_bytes)" +
                       too_large,
                   "communication: all_gather_bytes + reduce_scatter_bytes + all_reduce_bytes" +
                       too_large}));

  // Each parameter's bytes fit, their sum does not: 2^61 float32 elements are 2^63 bytes.
  doc = sample_doc();
  doc["units"][2]["groups"][0]["params"][0]["numel"] = int64_t{1} << 60;
  doc["units"][2]["groups"][0]["params"][1]["numel"] = int64_t{1} << 60;
  EXPECT_EQ(parse_problems(doc),
            Lines{"units[2].groups[0].params[1].numel: with this parameter, the bytes of the "
                  "plan's parameters" +
                  too_large});
  doc["units"][2]["groups"][0]["params"][1]["numel"] = 10;
  EXPECT_EQ(parse_problems(doc), Lines{});  // the rules, not the shape, catch the wrong numel
}

TEST(PlanJson, SurvivesDeeplyNestedJunk) {
  json doc = sample_doc();
  doc["mesh"] = json::parse(deep_array(100000));
  doc["units"][0]["groups"][0]["params"][0]["shape"] = json::parse(deep_array(100000));
  doc["schedule"] = json::parse(deep_array(100000));
  EXPECT_EQ(parse_problems(doc),
            (Lines{"mesh: expected an object, got an array",
                   "units[0].groups[0].params[0].shape[0]: expected an integer, got an array",
                   "schedule[0]: expected an object, got an array"}));
}

TEST(PlanJson, DeeplyNestedSchemaIsUnsupported) {
  json doc = sample_doc();
  doc["schema"] = json::parse(deep_array(100000));
  try {
    parse_plan(doc);
    FAIL() << "expected mfsdp::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kUsage);
    EXPECT_STREQ(error.what(),
                 "unsupported plan schema (an array); this mfsdp reads: mfsdp.plan/1");
  }
}

TEST(PlanJson, UnknownSchemaVersionIsAUsageError) {
  json doc = sample_doc();
  doc["schema"] = "mfsdp.plan/2";
  try {
    parse_plan(doc);
    FAIL() << "expected mfsdp::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kUsage);
    EXPECT_STREQ(error.what(),
                 "unsupported plan schema 'mfsdp.plan/2'; this mfsdp reads: "
                 "mfsdp.plan/1");
  }
}

TEST(PlanJson, MissingSchemaIsAUsageError) {
  json doc = sample_doc();
  doc.erase("schema");
  try {
    parse_plan(doc);
    FAIL() << "expected mfsdp::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kUsage);
    EXPECT_STREQ(error.what(),
                 "not an mfsdp plan: it has no \"schema\" field; this mfsdp reads: mfsdp.plan/1");
  }
}

TEST(PlanJson, DocumentThatIsNotAnObjectIsAUsageError) {
  try {
    parse_plan(json::parse(deep_array(100000)));
    FAIL() << "expected mfsdp::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kUsage);
    EXPECT_STREQ(error.what(),
                 "not an mfsdp plan: expected a JSON object, got an array; this "
                 "mfsdp reads: mfsdp.plan/1");
  }
}

TEST(PlanJson, DumpRejectsTextThatIsNotUtf8) {
  Plan plan = sample_plan();
  plan.model.path = "model\xff.pt";
  try {
    dump_plan(plan);
    FAIL() << "expected mfsdp::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kUsage);
  }
}

}  // namespace
}  // namespace mfsdp::schema

namespace mfsdp::schema {
namespace {

Training sample_training() {
  Training t;
  t.steps = 1000;
  t.global_batch = 64;
  t.optimizer = "adamw";
  t.lr = 3e-4;
  t.betas = std::vector<double>{0.9, 0.95};
  t.lr_schedule = "cosine";
  t.seed = 7;
  return t;
}

TEST(PlanJson, TrainingSectionIsWrittenLastWithOnlyItsSetKeysAndReadsBack) {
  Plan plan = sample_plan();
  plan.training = sample_training();
  const std::string text = dump_plan(plan);
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text);
  EXPECT_EQ(keys(doc).back(), "training");
  EXPECT_EQ(keys(doc["training"]),
            (std::vector<std::string>{"steps", "global_batch", "optimizer", "lr", "betas",
                                      "lr_schedule", "seed"}));
  const ParseResult parsed = parse_plan(json::parse(text));
  EXPECT_EQ(problem_lines(parsed.problems), Lines{});
  ASSERT_TRUE(parsed.plan.training);
  EXPECT_EQ(parsed.plan.training->lr, 3e-4);
  EXPECT_EQ(parsed.plan.training->betas, (std::vector<double>{0.9, 0.95}));
  EXPECT_FALSE(parsed.plan.training->momentum);
  EXPECT_EQ(dump_plan(parsed.plan), text);
}

TEST(PlanJson, PlanWithoutTrainingHasNoTrainingKey) {
  EXPECT_FALSE(sample_doc().contains("training"));
}

TEST(PlanJson, TrainingSectionProblemsNameTheirPath) {
  json doc = sample_doc();
  doc["training"] = {{"steps", "ten"}, {"learning_rate", 0.1}};
  EXPECT_EQ(parse_problems(doc), (Lines{"training.steps: expected an integer, got a string",
                                        "training.learning_rate: unknown field"}));
}

TEST(PlanJson, TrainingFromJsonChecksValuesAndNamesTheFile) {
  const json good = {{"steps", 5}, {"lr", 0.01}};
  EXPECT_EQ(training_from_json(good, "t.json", "").steps, 5);
  try {
    training_from_json({{"optimizer", "lamb"}}, "scope.json", "training");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_EQ(std::string(e.what()),
              "scope.json: training.optimizer: is 'lamb'; expected one of ['sgd', 'adam', "
              "'adamw'] (training keys: docs/plan-format.md#training)");
  }
  try {
    training_from_json({{"steps", 0}}, "t.json", "");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.json: steps: must be at least 1, got 0"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mfsdp::schema

namespace mfsdp::schema {
namespace {

// The sample plan with a trace of its forward order and a predicted step.
Plan predicted_plan() {
  Plan plan = sample_plan();
  Trace trace;
  trace.inputs = {"2x8"};
  for (const std::string& unit : plan.forward_order) {
    UnitTime t;
    t.unit = unit;
    trace.times.push_back(t);
  }
  plan.trace = trace;
  StepPrediction p;
  p.profile = "probe";
  p.microbatches = 2;
  p.microbatch_samples = 4;
  p.optimizer = "adamw";
  p.compute_scale = 1.25;
  p.compute_ms = 10.5;
  p.exposed_comm_ms = 2.25;
  p.contention_ms = 0.5;
  p.step_ms = 13.25;
  p.memory_bytes = 123456;
  plan.prediction = p;
  plan.training = Training{};
  plan.training->steps = 3;
  return plan;
}

TEST(PlanJson, APredictionIsWrittenAfterTheTraceAndReadBack) {
  const std::string text = dump_plan(predicted_plan());
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text);
  const std::vector<std::string> order = keys(doc);
  ASSERT_GE(order.size(), 3u);
  EXPECT_EQ((std::vector<std::string>(order.end() - 3, order.end())),
            (std::vector<std::string>{"trace", "prediction", "training"}));
  const ParseResult parsed = parse_plan(json::parse(text));
  EXPECT_EQ(problem_lines(parsed.problems), Lines{});
  EXPECT_EQ(dump_plan(parsed.plan), text);
  ASSERT_TRUE(parsed.plan.prediction.has_value());
  EXPECT_EQ(*parsed.plan.prediction->memory_bytes, 123456);
  json unknown = json::parse(text);
  unknown["prediction"]["step_us"] = 1;
  EXPECT_EQ(parse_problems(unknown), Lines{"prediction.step_us: unknown field"});
}

}  // namespace
}  // namespace mfsdp::schema
