// schema/plan.schema.json, the published JSON Schema of plan files: it accepts valid plans,
// rejects malformed ones, and every golden plan under plans/ passes it and check_plan and
// round-trips byte for byte.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>

#include "sample_plan.h"
#include "schema/plan_check.h"
#include "schema/plan_json.h"

namespace mfsdp::schema {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSourceDir = MFSDP_SOURCE_DIR;

class PlanSchema : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::ifstream in(kSourceDir / "schema" / "plan.schema.json");
    ASSERT_TRUE(in) << "cannot open schema/plan.schema.json under " << kSourceDir;
    schema_document_ = new json(json::parse(in));
    schema_ = new valijson::Schema;
    valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
    parser.populateSchema(valijson::adapters::NlohmannJsonAdapter(*schema_document_), *schema_);
  }

  static void TearDownTestSuite() {
    delete schema_;
    delete schema_document_;
  }

  // The JSON pointers of the places the schema rejects; empty when the document is valid.
  static std::vector<std::string> violations(const json& doc) {
    valijson::Validator validator;
    valijson::ValidationResults results;
    validator.validate(*schema_, valijson::adapters::NlohmannJsonAdapter(doc), &results);
    std::vector<std::string> places;
    valijson::ValidationResults::Error error;
    while (results.popError(error)) {
      std::string place;
      for (const std::string& part : error.context) place += part;
      places.push_back(place + ": " + error.description);
    }
    return places;
  }

  static bool valid(const json& doc) { return violations(doc).empty(); }

  static json sample_doc() { return json::parse(dump_plan(sample_plan())); }

  static json* schema_document_;
  static valijson::Schema* schema_;
};

json* PlanSchema::schema_document_ = nullptr;
valijson::Schema* PlanSchema::schema_ = nullptr;

TEST_F(PlanSchema, AcceptsTheSamplePlan) {
  EXPECT_EQ(violations(sample_doc()), std::vector<std::string>{});
}

TEST_F(PlanSchema, AcceptsNullForOptionalFields) {
  Plan plan = sample_plan();
  plan.policy.param_dtype.reset();
  EXPECT_EQ(violations(json::parse(dump_plan(plan))), std::vector<std::string>{});
}

TEST_F(PlanSchema, RejectsMissingField) {
  json doc = sample_doc();
  doc["units"][1].erase("call_count");
  EXPECT_FALSE(valid(doc));
}

TEST_F(PlanSchema, RejectsUnknownField) {
  json doc = sample_doc();
  doc["schedule"][0]["note"] = "x";
  EXPECT_FALSE(valid(doc));
}

TEST_F(PlanSchema, RejectsWrongTypes) {
  json doc = sample_doc();
  doc["units"][0]["groups"][0]["padded_numel"] = "32";
  EXPECT_FALSE(valid(doc));
  doc = sample_doc();
  doc["units"][0]["groups"][0]["padded_numel"] = 32.5;
  EXPECT_FALSE(valid(doc));
  doc = sample_doc();
  doc["units"][0]["parent"] = 3;
  EXPECT_FALSE(valid(doc));
}

TEST_F(PlanSchema, RejectsValuesOutsideTheEnums) {
  for (const auto& [pointer, value] :
       std::vector<std::pair<std::string, json>>{{"/schedule/0/phase", "sideways"},
                                                 {"/schedule/0/point", "mid_forward"},
                                                 {"/units/0/groups/0/dtype", "complex64"},
                                                 {"/policy/param_dtype", "int8"},
                                                 {"/policy/reduce_dtype", "uint8"},
                                                 {"/diagnostics/0/severity", "fatal"},
                                                 {"/streams/0/name", "side"},
                                                 {"/schema", "mfsdp.plan/2"}}) {
    json doc = sample_doc();
    doc[json::json_pointer(pointer)] = value;
    EXPECT_FALSE(valid(doc)) << pointer << " = " << value.dump();
  }
}

TEST_F(PlanSchema, RejectsNegativeCountsAndEmptyMesh) {
  json doc = sample_doc();
  doc["schedule"][2]["unsharded_bytes"] = -1;
  EXPECT_FALSE(valid(doc));
  doc = sample_doc();
  doc["mesh"]["shard_size"] = 0;
  EXPECT_FALSE(valid(doc));
}

TEST_F(PlanSchema, BoundsMeshSizesAndAlignmentLikeParsePlan) {
  for (const char* pointer : {"/mesh/world_size", "/mesh/shard_size", "/mesh/replicate_size"}) {
    json doc = sample_doc();
    doc[json::json_pointer(pointer)] = 2147483648;
    EXPECT_FALSE(valid(doc)) << pointer;
    EXPECT_FALSE(parse_plan(doc).problems.empty()) << pointer;
  }
  json doc = sample_doc();
  doc["policy"]["align_bytes"] = 2147483648;
  EXPECT_FALSE(valid(doc));
  EXPECT_FALSE(parse_plan(doc).problems.empty());
  doc["policy"]["align_bytes"] = 1073741824;
  EXPECT_TRUE(valid(doc));
}

TEST_F(PlanSchema, GoldenPlansPassTheSchemaAndCheckPlan) {
  const fs::path plans = kSourceDir / "plans";
  std::vector<fs::path> files;
  if (fs::is_directory(plans)) {
    for (const auto& entry : fs::recursive_directory_iterator(plans)) {
      if (entry.is_regular_file() && entry.path().extension() == ".json") {
        files.push_back(entry.path());
      }
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    std::ifstream in(file, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(violations(json::parse(text)), std::vector<std::string>{});
    const ParseResult parsed = read_plan_file(file.string());
    ASSERT_EQ(problem_lines(parsed.problems), std::vector<std::string>{});
    EXPECT_EQ(problem_lines(check_plan(parsed.plan)), std::vector<std::string>{});
    // Plans are written by dump_plan, so reading and writing one back changes no byte.
    EXPECT_EQ(dump_plan(parsed.plan), text);
  }
}

}  // namespace
}  // namespace mfsdp::schema

namespace mfsdp::schema {
namespace {

TEST_F(PlanSchema, AcceptsATrainingSectionAndRejectsBadValues) {
  Plan plan = sample_plan();
  plan.training = Training{};
  plan.training->steps = 100;
  plan.training->lr = 3e-4;
  plan.training->betas = std::vector<double>{0.9, 0.95};
  plan.training->optimizer = "adamw";
  const json doc = json::parse(dump_plan(plan));
  EXPECT_EQ(violations(doc), std::vector<std::string>{});
  for (const auto& [key, value] : std::vector<std::pair<std::string, json>>{
           {"steps", 0}, {"optimizer", "lamb"}, {"betas", json::array({0.9})}, {"lr", 0}}) {
    json bad = doc;
    bad["training"][key] = value;
    EXPECT_FALSE(valid(bad)) << key << " = " << value.dump();
  }
}

// A traced plan's activations: accepted as parse_plan writes them (a unit may free more than
// it keeps, so saved_bytes may be negative), refused with a bad loss, a zero microbatch or
// a missing field, and read back unchanged.
TEST_F(PlanSchema, AcceptsActivationsAndRejectsBadValues) {
  Plan plan = sample_plan();
  plan.trace = Trace{};
  plan.trace->inputs = {"4x16:int64"};
  Activations a;
  a.microbatch = 4;
  a.peak_bytes = 1000;
  a.peak_at = "loss";
  a.output_bytes = 256;
  a.loss = "cross_entropy";
  for (const std::string& unit : plan.forward_order) a.units.push_back({unit, -16});
  plan.memory.activations = a;
  const std::string text = dump_plan(plan);
  const json doc = json::parse(text);
  EXPECT_EQ(violations(doc), std::vector<std::string>{});
  EXPECT_EQ(dump_plan(parse_plan(doc).plan), text);
  for (const auto& [key, value] : std::vector<std::pair<std::string, json>>{
           {"loss", "mse"}, {"microbatch", 0}, {"peak_bytes", -1}, {"units", json::array({1})}}) {
    json bad = doc;
    bad["memory"]["activations"][key] = value;
    EXPECT_FALSE(valid(bad)) << key << " = " << value.dump();
  }
  json missing = doc;
  missing["memory"]["activations"].erase("peak_at");
  EXPECT_FALSE(valid(missing));
}

// A shape-only trace: the schema accepts what mfsdp writes, the reader gives it back byte for
// byte, and the schema rejects another device, a negative count and an unknown class.
TEST_F(PlanSchema, AcceptsAMetaTraceAndRejectsBadWork) {
  Plan plan = sample_plan();
  plan.trace = Trace{};
  plan.trace->inputs = {"1x8192:int64"};
  plan.trace->device = "meta";
  plan.trace->attention = "fused";
  for (const std::string& unit : plan.forward_order) {
    UnitWork w{unit, {}, {}, {}};
    w.pre_forward.matmul = {2048, 96, 2};
    w.backward.embedding = {0, 64, 1};
    plan.trace->work.push_back(w);
  }
  plan.trace->loss_work = Work{};
  plan.trace->loss_work->elementwise = {10, 80, 3};
  const std::string text = dump_plan(plan);
  const json doc = json::parse(text);
  EXPECT_EQ(violations(doc), std::vector<std::string>{});
  EXPECT_EQ(dump_plan(parse_plan(doc).plan), text);
  json bad = doc;
  bad["trace"]["device"] = "cpu";
  EXPECT_FALSE(valid(bad));
  bad = doc;
  bad["trace"]["attention"] = "math";
  EXPECT_FALSE(valid(bad));
  bad = doc;
  bad["trace"]["work"][0]["pre_forward"]["matmul"]["flops"] = -1;
  EXPECT_FALSE(valid(bad));
  bad = doc;
  bad["trace"]["loss_work"]["conv"] = {{"flops", 0}, {"bytes", 0}, {"ops", 0}};
  EXPECT_FALSE(valid(bad));
  bad = doc;
  bad["trace"]["loss_work"]["elementwise"].erase("ops");
  EXPECT_FALSE(valid(bad));
}

}  // namespace
}  // namespace mfsdp::schema
