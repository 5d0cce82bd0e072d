// model.path is relative to the plan file (docs/plan-format.md, "model"): what `mfsdp plan`
// records, and where readers find the model.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "schema/model_path.h"

namespace mfsdp::schema {
namespace {

namespace fs = std::filesystem;

TEST(ModelPath, RecordsTheModelRelativeToThePlansDirectory) {
  EXPECT_EQ(model_path_for_plan("examples/bytegpt.pt", "build/bytegpt.plan.json"),
            "../examples/bytegpt.pt");
  EXPECT_EQ(model_path_for_plan("bytegpt.pt", "bytegpt.plan.json"), "bytegpt.pt");
  EXPECT_EQ(model_path_for_plan("./m.pt", "./p.json"), "m.pt");
  EXPECT_EQ(model_path_for_plan("a/../b/m.pt", "b/plans/p.json"), "../m.pt");
  EXPECT_EQ(model_path_for_plan("m.pt", "/tmp/elsewhere/p.json"),
            (fs::current_path() / "m.pt").lexically_relative("/tmp/elsewhere").generic_string());
  // An absolute model stays absolute, wherever the plan goes.
  EXPECT_EQ(model_path_for_plan("/models/gpt.pt", "build/p.json"), "/models/gpt.pt");
}

class LocateModel : public ::testing::Test {
 protected:
  void SetUp() override {
    // ctest runs each test in a process of its own, in parallel: one directory each.
    root_ = fs::path(::testing::TempDir()) / ("locate_model_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "plans");
    fs::create_directories(root_ / "models");
    std::ofstream(root_ / "models" / "m.pt") << "x";
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(LocateModel, ReadsARelativePathFromThePlansDirectory) {
  const ModelLocation found = locate_model("../models/m.pt", (root_ / "plans" / "p.json").string());
  EXPECT_EQ(found.path, (root_ / "models" / "m.pt").string());
  EXPECT_FALSE(found.from_current_directory);
  // An absolute one as it is.
  const std::string absolute = (root_ / "models" / "m.pt").string();
  EXPECT_EQ(locate_model(absolute, "elsewhere/p.json").path, absolute);
}

TEST_F(LocateModel, FindsAnOldPlansModelInTheCurrentDirectoryAndSaysSo) {
  // An old plan in plans/ recorded the model from where `mfsdp plan` ran: here, root_.
  const fs::path before = fs::current_path();
  fs::current_path(root_);
  const ModelLocation found = locate_model("models/m.pt", "plans/p.json");
  fs::current_path(before);
  EXPECT_EQ(found.path, "models/m.pt");
  EXPECT_TRUE(found.from_current_directory);
}

TEST_F(LocateModel, NamesThePlanRelativeFileWhenNeitherExists) {
  const ModelLocation found = locate_model("no/such.pt", (root_ / "plans" / "p.json").string());
  EXPECT_EQ(found.path, (root_ / "plans" / "no" / "such.pt").string());
  EXPECT_FALSE(found.from_current_directory);
}

}  // namespace
}  // namespace mfsdp::schema
