// A plan's training section as training settings (executor/train/plan_training.h): the
// defaults `mfsdp run` and C++ callers of train() get, and what the caller's own settings win.
#include "executor/train/plan_training.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "schema/error.h"

namespace mfsdp::executor {
namespace {

namespace fs = std::filesystem;

// plans/tied_lm.plan.json with `training`, written into a directory of this process's own.
std::string plan_with_training(const nlohmann::json& training) {
  std::ifstream in(std::string(MFSDP_SOURCE_DIR) + "/plans/tied_lm.plan.json");
  nlohmann::json doc = nlohmann::json::parse(in);
  doc["training"] = training;
  const fs::path dir =
      fs::temp_directory_path() / ("mfsdp_plan_training_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "trained.plan.json").string();
  std::ofstream(path) << doc.dump(2);
  return path;
}

const nlohmann::json kTraining = {
    {"steps", 300},          {"global_batch", 24}, {"microbatches", 3},
    {"optimizer", "sgd"},    {"lr", 0.05},         {"momentum", 0.9},
    {"betas", {0.8, 0.95}},  {"warmup", 7},        {"lr_schedule", "cosine"},
    {"clip_grad_norm", 1.5}, {"loss", "mse"},      {"seed", 11}};

TEST(PlanTraining, AConfigFromThePlanCarriesEveryTrainingDefault) {
  const std::string plan = plan_with_training(kTraining);
  const TrainConfig config = train_config_from_plan(plan);
  EXPECT_EQ(config.plan_path, plan);
  // model.path is relative to the plan file: "../tests/fixtures/tied_lm.pt" from /tmp/X/.
  EXPECT_EQ(fs::path(config.model_path).lexically_normal(),
            (fs::path(plan).parent_path().parent_path() / "tests/fixtures/tied_lm.pt")
                .lexically_normal());
  EXPECT_EQ(config.steps, 300);
  EXPECT_EQ(config.data.global_batch, 24);
  EXPECT_EQ(config.data.microbatches, 3);
  EXPECT_EQ(config.optimizer.kind, "sgd");
  EXPECT_DOUBLE_EQ(config.optimizer.lr, 0.05);
  EXPECT_DOUBLE_EQ(config.optimizer.momentum, 0.9);
  EXPECT_DOUBLE_EQ(config.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(config.optimizer.beta2, 0.95);
  EXPECT_EQ(config.warmup_steps, 7);
  EXPECT_EQ(config.lr_schedule, "cosine");
  ASSERT_TRUE(config.clip_grad_norm.has_value());
  EXPECT_DOUBLE_EQ(*config.clip_grad_norm, 1.5);
  EXPECT_EQ(config.loss, "mse");
  EXPECT_EQ(config.data.seed, 11u);
}

TEST(PlanTraining, WhatTheCallerGaveWins) {
  schema::Training training;
  training.steps = 300;
  training.lr = 0.05;
  training.seed = 11;
  TrainConfig config;
  config.steps = 5;
  config.optimizer.lr = 0.5;
  apply_plan_training(training, config,
                      [](const std::string& flag) { return flag == "--steps" || flag == "--lr"; });
  EXPECT_EQ(config.steps, 5);
  EXPECT_DOUBLE_EQ(config.optimizer.lr, 0.5);
  EXPECT_EQ(config.data.seed, 11u);  // not given: the plan's
}

TEST(PlanTraining, APlanWithoutTrainingLeavesTheDefaults) {
  const TrainConfig config =
      train_config_from_plan(std::string(MFSDP_SOURCE_DIR) + "/plans/tied_lm.plan.json");
  const TrainConfig defaults;
  EXPECT_EQ(config.steps, defaults.steps);
  EXPECT_DOUBLE_EQ(config.optimizer.lr, defaults.optimizer.lr);
  EXPECT_EQ(config.optimizer.kind, defaults.optimizer.kind);
}

TEST(PlanTraining, ANonPlanIsAUsageError) {
  try {
    train_config_from_plan(std::string(MFSDP_SOURCE_DIR) + "/README.md");
    FAIL() << "README.md was read as a plan";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
  }
}

}  // namespace
}  // namespace mfsdp::executor
