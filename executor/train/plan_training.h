#pragma once
// A plan's training section (`mfsdp plan --training FILE`, docs/plan-format.md) as training
// settings: the one place where the plan's defaults meet a TrainConfig, for `mfsdp run` and
// for C++ callers of train() alike.

#include <functional>
#include <string>

#include "executor/train/trainer.h"
#include "schema/plan.h"

namespace mfsdp::executor {

// Sets every field the section has, except those `given` claims: it is asked with `mfsdp
// run`'s flag name ("--steps", "--lr", ...) and says whether the caller set that itself.
void apply_plan_training(const schema::Training& training, TrainConfig& config,
                         const std::function<bool(const std::string& flag)>& given = {});

// Where a C++ caller of train() starts: plan_path and model_path (the plan's model.path,
// relative to the plan file), and the plan's training defaults. Error(kUsage) when the file
// is not a plan.
TrainConfig train_config_from_plan(const std::string& plan_path);

}  // namespace mfsdp::executor
