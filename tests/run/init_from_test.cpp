// `mfsdp run --init-from`: a run from one model file and another model's weights in
// safetensors trains exactly like a run from the other model's file. Both fixtures were
// written by Python (tests/fixtures/safetensors/make_init_fixtures.py: Debian's torch and PyPI's
// safetensors), not by mfsdp.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "safetensors/safetensors.h"
#include "tests/cli/cli_test_support.h"
#include "tests/run/metrics_losses.h"
#include "tests/run/tied_runs.h"

namespace mfsdp::testing {
namespace {

namespace fs = std::filesystem;

const std::string kInitModel = "tests/fixtures/tied_lm.pt";
const std::string kChangedModel = "tests/fixtures/safetensors/tied_lm_changed.pt";
const std::string kChangedWeights = "tests/fixtures/safetensors/tied_lm_changed.safetensors";
// tied_lm.pt loaded onto the meta device and saved: its code and structure, no values.
const std::string kSkeleton = "tests/fixtures/safetensors/tied_lm_skeleton.pt";

TEST(InitFrom, TrainsExactlyLikeTheModelFileTheWeightsCameFrom) {
  const std::string reference_metrics = temp_path("init_reference.jsonl");
  const std::string init_metrics = temp_path("init_from.jsonl");
  fs::remove(reference_metrics);
  fs::remove(init_metrics);
  const RunResult reference =
      mfsdp(tied_run(tied_plan(kChangedModel, "init_reference"), reference_metrics));
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  std::vector<std::string> args = tied_run(tied_plan(kInitModel, "init_from"), init_metrics);
  args.insert(args.end(), {"--init-from", kChangedWeights});
  const RunResult run = mfsdp(args);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("[rank 0] mfsdp run: initial weights from " + kChangedWeights +
                         ": 28 parameter(s), in their dtypes\n"),
            std::string::npos)
      << run.out;
  const auto expected = rank0_losses(reference_metrics);
  ASSERT_EQ(expected.size(), 4u);
  EXPECT_EQ(rank0_losses(init_metrics), expected);
  // From the skeleton of the same model, whose file holds no values at all: the same again.
  const std::string skeleton_metrics = temp_path("init_skeleton.jsonl");
  fs::remove(skeleton_metrics);
  args = tied_run(tied_plan(kSkeleton, "init_skeleton"), skeleton_metrics);
  args.insert(args.end(), {"--init-from", kChangedWeights});
  const RunResult skeleton = mfsdp(args);
  ASSERT_EQ(skeleton.exit_code, 0) << skeleton.err;
  EXPECT_EQ(rank0_losses(skeleton_metrics), expected);
  // Not what the model file itself would train: the weights did come from the file.
  const std::string own_metrics = temp_path("init_own.jsonl");
  fs::remove(own_metrics);
  ASSERT_EQ(mfsdp(tied_run(tied_plan(kInitModel, "init_own"), own_metrics)).exit_code, 0);
  EXPECT_NE(rank0_losses(own_metrics), expected);
}

// Weights in bfloat16 are converted to the float32 masters, and the log says so.
TEST(InitFrom, ConvertsFloatingDtypesAndSaysSo) {
  const safetensors::Checkpoint source(kRepo + "/" + kChangedWeights);
  const std::string dir = temp_path("init_bf16");
  fs::remove_all(dir);
  {
    safetensors::ShardedWriter writer(dir, 40 * 1000);
    for (const auto& [name, entry] : source.tensors()) {
      writer.declare(name, safetensors::Dtype::kBF16, entry.info->shape);
    }
    for (const auto& [name, entry] : source.tensors()) {
      // float32 -> bfloat16 by truncation: the upper half of each little-endian float.
      const auto* floats = reinterpret_cast<const uint32_t*>(entry.file->data(*entry.info));
      std::vector<uint16_t> halves(entry.info->byte_size() / 4);
      for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(floats[i] >> 16);
      writer.write(name, halves.data(), halves.size() * 2);
    }
    writer.finish();
  }
  std::vector<std::string> args =
      tied_run(tied_plan(kInitModel, "init_bf16"), temp_path("init_bf16.jsonl"));
  args.insert(args.end(), {"--init-from", dir, "--steps", "1"});
  const RunResult run = mfsdp(args);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find(": 28 parameter(s), bfloat16 -> float32 for 28\n"), std::string::npos)
      << run.out;
}

TEST(InitFrom, WeightsThatDoNotFitAreOneLineWithExitTwoAndNothingTrained) {
  const safetensors::Checkpoint source(kRepo + "/" + kChangedWeights);
  const std::string dir = temp_path("init_bad");
  fs::remove_all(dir);
  {
    safetensors::ShardedWriter writer(dir, 1 << 30);
    for (const auto& [name, entry] : source.tensors()) {
      if (name == "layers.0.ln1.bias") continue;  // missing
      std::vector<int64_t> shape = entry.info->shape;
      if (name == "layers.1.mlp.fc.weight") std::swap(shape[0], shape[1]);  // another shape
      // An integer type of the same size: no conversion to float32 is taken for granted.
      const bool integer = name == "layers.0.ln2.weight";
      writer.declare(name, integer ? safetensors::Dtype::kI32 : entry.info->dtype, shape);
    }
    writer.declare("extra.weight", safetensors::Dtype::kF32, {2});  // unexpected
    for (const auto& [name, entry] : source.tensors()) {
      if (name == "layers.0.ln1.bias") continue;
      writer.write(name, entry.file->data(*entry.info), entry.info->byte_size());
    }
    const float extra[2] = {1, 2};
    writer.write("extra.weight", extra, sizeof extra);
    writer.finish();
  }
  const std::string metrics = temp_path("init_bad.jsonl");
  fs::remove(metrics);
  std::vector<std::string> args = tied_run(tied_plan(kInitModel, "init_bad"), metrics);
  args.insert(args.end(), {"--init-from", dir});
  const RunResult run = mfsdp(args);
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--init-from " + dir +
                         " does not fit the model: missing (1): layers.0.ln1.bias; unexpected "
                         "(1): extra.weight; of another shape (1): layers.1.mlp.fc.weight [32, "
                         "128] in the file, [128, 32] in the model; of another dtype (1): "
                         "layers.0.ln2.weight I32 in the file, float32 in the model; nothing was "
                         "trained."),
            std::string::npos)
      << run.err;
  EXPECT_EQ(run.out.find("step 1/"), std::string::npos) << run.out;
  EXPECT_FALSE(fs::exists(metrics) && fs::file_size(metrics) > 0);
}

// A skeleton has nothing to read: without weights, or where its values would be needed, one
// line says what to do instead, before any step.
TEST(InitFrom, ASkeletonWithoutWeightsIsRefusedWithTheOptions) {
  const std::string plan = tied_plan(kSkeleton, "skeleton_alone");
  const RunResult run = mfsdp(tied_run(plan, temp_path("skeleton_alone.jsonl")));
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("mfsdp: error: " + kRepo + "/" + kSkeleton +
                         " is a skeleton: its tensors were saved from the meta device and hold "
                         "no values; give the initial weights with --init-from WEIGHTS "
                         "(safetensors), --init normal:0.02 (a rule), or --resume from a "
                         "checkpoint, or train the full model file (docs/large-models.md)\n"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(run.out.find("step 1/"), std::string::npos) << run.out;

  std::vector<std::string> args = tied_run(plan, temp_path("skeleton_save.jsonl"));
  args.insert(args.end(),
              {"--init-from", kChangedWeights, "--save-model", temp_path("skeleton_trained.pt")});
  const RunResult save = mfsdp(args);
  EXPECT_EQ(save.exit_code, 2) << save.err;
  EXPECT_NE(save.err.find("is a skeleton with no values to write around them; save checkpoints "
                          "(--checkpoint-dir) and mfsdp export them with --format safetensors"),
            std::string::npos)
      << save.err;
  EXPECT_EQ(save.out.find("step 1/"), std::string::npos) << save.out;

  const RunResult trace =
      mfsdp({"plan", kSkeleton, "--world-size", "2", "--unit", "layers.*", "--trace-input",
             "2x16:int64", "-o", temp_path("skeleton_traced.plan.json")});
  EXPECT_EQ(trace.exit_code, 2) << trace.err;
  EXPECT_NE(trace.err.find("is a skeleton (saved from the meta device; "), std::string::npos)
      << trace.err;
  EXPECT_EQ(std::count(trace.err.begin(), trace.err.end(), '\n'), 1) << trace.err;
}

}  // namespace
}  // namespace mfsdp::testing
