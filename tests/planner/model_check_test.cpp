// The one check of a plan against a model (planner/torchscript/model_check.h): what validate
// --model lists, and the one line the executor and export refuse with.
#include "planner/torchscript/model_check.h"

#include <gtest/gtest.h>

#include "planner/sharding_scope.h"
#include "planner/torchscript/model_loader.h"
#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

const FitHints kHints{"other model", "edited plan"};

schema::Plan tied_lm_plan() {
  ShardedModel model = ShardedModel::load(fixture("tied_lm.pt"));
  ShardingScope scope(model, {2, 2, 1}, {});
  for (const char* unit : {"layers.0", "layers.1", "<root>"}) scope.fully_shard(unit);
  return scope.finalize();
}

TEST(ModelCheck, APlanFitsTheModelItWasMadeFor) {
  const schema::Plan plan = tied_lm_plan();
  const ModelIR model = load_model(fixture("tied_lm.pt"));
  EXPECT_TRUE(compare_plan_with_model(plan, model, "tied_lm.pt").empty());
  EXPECT_NO_THROW(require_plan_fits_model(plan, model, "tied_lm.pt", "plan.json", kHints));
}

TEST(ModelCheck, AnEditedShapeIsNamedAndTheHashBlamesThePlan) {
  schema::Plan plan = tied_lm_plan();
  plan.units[1].groups[0].params[0].shape[0] += 1;
  const ModelIR model = load_model(fixture("tied_lm.pt"));
  const auto problems = compare_plan_with_model(plan, model, "m.pt");
  ASSERT_EQ(problems.size(), 1u) << problems[0].str();
  EXPECT_EQ(problems[0].path, "units[1].groups[0].params[0].shape");
  const std::string name = plan.units[1].groups[0].params[0].name;
  EXPECT_MFSDP_ERROR(require_plan_fits_model(plan, model, "m.pt", "plan.json", kHints),
                     ExitCode::kUsage,
                     "m.pt does not match plan.json: units[1].groups[0].params[0].shape: is [");
  EXPECT_MFSDP_ERROR(require_plan_fits_model(plan, model, "m.pt", "plan.json", kHints),
                     ExitCode::kUsage, "'" + name + "' in m.pt is [");
  EXPECT_MFSDP_ERROR(require_plan_fits_model(plan, model, "m.pt", "plan.json", kHints),
                     ExitCode::kUsage, "]; edited plan");
}

TEST(ModelCheck, AnotherModelNamesAParameterCountsTheRestAndBlamesTheModel) {
  const schema::Plan plan = tied_lm_plan();
  const ModelIR other = load_model(fixture("untied_lm.pt"));
  const auto problems = compare_plan_with_model(plan, other, "untied_lm.pt");
  ASSERT_GE(problems.size(), 2u);
  EXPECT_EQ(problems[0].path, "model.structural_hash");
  try {
    require_plan_fits_model(plan, other, "untied_lm.pt", "plan.json", kHints);
    FAIL() << "expected a mismatch";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("untied_lm.pt does not match plan.json: model.structural_hash"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(" (and " + std::to_string(problems.size() - 1) + " more); other model"),
              std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace mfsdp::planner
