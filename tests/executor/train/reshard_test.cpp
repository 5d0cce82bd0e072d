// Checkpoints across plans, as users run them: `mfsdp run NEW_PLAN --resume CKPT` on another
// world size, mesh or unit set, and `mfsdp reshard` offline. A resharded run is compared with
// the same run left uninterrupted; the offline conversion is checked value for value.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include <torch/script.h>

#include "executor/train/reshard.h"
#include "schema/plan_loader.h"
#include "tests/cli/cli_test_support.h"
#include "tests/executor/train/checkpoint_runs.h"

namespace mfsdp::testing {
namespace {

namespace fs = std::filesystem;

using Params = std::map<std::string, at::Tensor>;

// Plans the tied_lm fixture (layers.0, layers.1, <root>) into dir/name.
std::string plan_for(const std::string& dir, const std::string& name, int world,
                     std::vector<std::string> units = {"layers.*", "<root>"}, int replicate = 1,
                     const std::vector<std::string>& flags = {}) {
  const std::string out = dir + "/" + name;
  std::vector<std::string> args = {
      "plan",        "tests/fixtures/tied_lm.pt", "--world-size", std::to_string(world),
      "--replicate", std::to_string(replicate),   "-o",           out,
      "-q"};
  for (const std::string& unit : units) args.insert(args.end(), {"--unit", unit});
  args.insert(args.end(), flags.begin(), flags.end());
  const RunResult r = mfsdp(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return out;
}

// `mfsdp run` of `plan` on its world size, up to step `steps`, checkpointing into `ckpt`.
RunResult train(const std::string& plan, int ranks, int steps, const std::string& ckpt,
                const std::vector<std::string>& optimizer, const std::string& resume = "") {
  std::vector<std::string> args = {"run",
                                   plan,
                                   "--nproc-per-node",
                                   std::to_string(ranks),
                                   "--input-shape",
                                   "16",
                                   "--global-batch",
                                   "12",
                                   "--steps",
                                   std::to_string(steps),
                                   "--checkpoint-dir",
                                   ckpt,
                                   "--master-port",
                                   "0"};
  args.insert(args.end(), optimizer.begin(), optimizer.end());
  if (!resume.empty()) args.insert(args.end(), {"--resume", resume});
  return mfsdp(args);
}

// The parameters of the newest checkpoint under `ckpt`, through `mfsdp export`.
Params exported(const std::string& ckpt) {
  static int exports = 0;  // beside the test's scratch files, never in the checkpoint's directory
  const std::string out = temp_path("reshard_export_" + std::to_string(::getpid()) + "_" +
                                    std::to_string(++exports) + ".pt");
  const RunResult r =
      mfsdp({"export", ckpt, "-o", out, "--model", "tests/fixtures/tied_lm.pt", "-q"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  Params params;
  for (const auto& p : torch::jit::load(out).named_parameters(/*recurse=*/true)) {
    params[p.name] = p.value.clone();
  }
  return params;
}

// ||a - b|| / ||b|| over every parameter together.
double relative_l2(const Params& a, const Params& b) {
  double diff = 0, norm = 0;
  for (const auto& [name, value] : b) {
    diff += (a.at(name) - value).pow(2).sum().item<double>();
    norm += value.pow(2).sum().item<double>();
  }
  return std::sqrt(diff / norm);
}

const std::vector<std::string> kSgd = {"--optimizer", "sgd", "--momentum", "0.9", "--lr", "5e-2"};
const std::vector<std::string> kAdamW = {"--optimizer", "adamw", "--lr", "1e-2"};

// A leg of a resharded run: the plan's mesh and units.
struct Leg {
  int world = 2;
  std::vector<std::string> units = {"layers.*", "<root>"};
  int replicate = 1;
};

// 12 steps straight on 2 ranks, and the same 12 steps as 4 on 2 ranks, 4 on `second` and 4
// on `third`, each resuming the last one's checkpoint: how far apart they end.
double resharded_against_straight(const std::string& name, const std::vector<std::string>& opt,
                                  const Leg& second, const Leg& third) {
  const std::string dir = fresh_dir(name);
  const std::string two = plan_for(dir, "two.json", 2);
  RunResult r = train(two, 2, 12, dir + "/straight", opt);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = train(two, 2, 4, dir + "/a", opt);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = train(plan_for(dir, "second.json", second.world, second.units, second.replicate),
            second.world, 8, dir + "/b", opt, dir + "/a");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("resumed from " + dir +
                       "/a/step-00000004 (step 4), resharded from 2 "
                       "ranks as shard 2 x replicate 1, plan "),
            std::string::npos)
      << r.out;
  r = train(plan_for(dir, "third.json", third.world, third.units, third.replicate), third.world, 12,
            dir + "/c", opt, dir + "/b/step-00000008");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(step 8), resharded from"), std::string::npos) << r.out;
  return relative_l2(exported(dir + "/c"), exported(dir + "/straight"));
}

// SGD with momentum does not amplify rounding: summing the same global batch's gradients in
// another order leaves the runs ~1e-8 apart (7.8e-9 measured over 12 steps).
TEST(CheckpointReshard, SgdMomentumOnThreeThenOneRankTracksTheUninterruptedRun) {
  EXPECT_LT(resharded_against_straight("sgd", kSgd, {3}, {1}), 1e-6);
}

// Adam divides by the root of its second moment, which turns rounding noise in gradients
// that are zero in exact arithmetic (attention's key biases) into steps of about lr: the runs
// end ~1e-4 apart, as two uninterrupted runs on 2 and 3 ranks do. Lost moments or step
// counts would move every parameter by ~lr (1e-2 relative and more).
TEST(CheckpointReshard, AdamWOnOtherUnitsThenAnHsdpMeshTracksTheUninterruptedRun) {
  EXPECT_LT(
      resharded_against_straight("adamw", kAdamW, {3, {"<root>"}}, {4, {"layers.*", "<root>"}, 2}),
      1e-3);
}

// What `mfsdp reshard` writes holds every value of the checkpoint it read: 2 ranks to 3 with
// other units, to a 2 x 2 HSDP mesh with other alignment and compute dtype, and back gives
// the same shards, optimizer state, buffers and generators.
TEST(CheckpointReshard, OfflineThereAndBackKeepsEveryValue) {
  const std::string dir = fresh_dir("offline");
  const std::string two = plan_for(dir, "two.json", 2);
  const std::string three = plan_for(dir, "three.json", 3, {"layers.1", "<root>"});
  const std::string hsdp = plan_for(dir, "hsdp.json", 4, {"layers.0", "<root>"}, 2,
                                    {"--align", "256", "--param-dtype", "bfloat16"});
  ASSERT_EQ(train(two, 2, 3, dir + "/a", kAdamW).exit_code, 0);
  RunResult r = mfsdp({"reshard", dir + "/a", "--plan", three, "-o", dir + "/b"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.rfind("mfsdp reshard: " + dir +
                            "/a/step-00000003 (step 3; 2 ranks as shard 2 x replicate 1, plan ",
                        0),
            0u)
      << r.err;
  EXPECT_NE(r.err.find(") -> " + dir + "/b/step-00000003 (3 ranks as shard 3 x replicate 1, plan "),
            std::string::npos)
      << r.err;
  r = mfsdp({"reshard", dir + "/b/step-00000003", "--plan", hsdp, "-o", dir + "/h", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  r = mfsdp({"reshard", dir + "/h/step-00000003", "--plan", two, "-o", dir + "/c", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const schema::Plan plan = schema::load_plan_file(two, schema::PlanCheck::kRules);
  const executor::SavedCheckpoint original = executor::open_checkpoint(dir + "/a/step-00000003");
  const executor::SavedCheckpoint back = executor::open_checkpoint(dir + "/c/step-00000003");
  EXPECT_EQ(back.manifest.plan_sha256, original.manifest.plan_sha256);
  EXPECT_EQ(back.manifest.resharded_from.at("mesh").at("world_size"), 4);
  EXPECT_EQ(back.manifest.resharded_from.at("mesh").at("replicate_size"), 2);
  for (int rank = 0; rank < 2; ++rank) {
    // A checkpoint read under its own plan comes back as saved.
    const executor::ReshardedRank a = executor::reshard_rank(original, plan, rank);
    const executor::ReshardedRank b = executor::reshard_rank(back, plan, rank);
    ASSERT_EQ(a.shards.size(), b.shards.size());
    for (size_t g = 0; g < a.shards.size(); ++g) {
      EXPECT_TRUE(torch::equal(a.shards[g], b.shards[g])) << "rank " << rank << " group " << g;
      ASSERT_TRUE(a.optimizer[g] && b.optimizer[g]);
      EXPECT_EQ(a.optimizer[g]->step, 3);
      EXPECT_EQ(b.optimizer[g]->step, 3);
      ASSERT_EQ(a.optimizer[g]->tensors.size(), 2u);  // exp_avg, exp_avg_sq
      ASSERT_EQ(b.optimizer[g]->tensors.size(), 2u);
      for (size_t t = 0; t < 2; ++t) {
        EXPECT_EQ(a.optimizer[g]->tensors[t].first, b.optimizer[g]->tensors[t].first);
        EXPECT_TRUE(
            torch::equal(a.optimizer[g]->tensors[t].second, b.optimizer[g]->tensors[t].second))
            << a.optimizer[g]->tensors[t].first << " of rank " << rank << " group " << g;
      }
      EXPECT_GT(a.optimizer[g]->tensors[1].second.abs().sum().item<double>(), 0);
    }
    EXPECT_TRUE(torch::equal(a.rng_state, b.rng_state));
    EXPECT_EQ(a.buffer_names, b.buffer_names);
  }
  EXPECT_EQ(relative_l2(exported(dir + "/c"), exported(dir + "/a")), 0.0);
  EXPECT_EQ(relative_l2(exported(dir + "/b"), exported(dir + "/a")), 0.0);
  EXPECT_EQ(relative_l2(exported(dir + "/h"), exported(dir + "/a")), 0.0);
}

// Checkpoints saved before resharding existed (format mfsdp.checkpoint/1, committed under
// tests/fixtures/checkpoints/) still resume as saved, and reshard.
TEST(CheckpointReshard, ACheckpointOfTodaysFormatResumesAndReshards) {
  const std::string fixture = kRepo + "/tests/fixtures/checkpoints/tied_lm_adamw/step-00000002";
  const std::string dir = fresh_dir("format");
  std::vector<std::string> args = {"run",
                                   fixture + "/plan.json",
                                   "--model",
                                   "tests/fixtures/tied_lm.pt",
                                   "--nproc-per-node",
                                   "2",
                                   "--input-shape",
                                   "16",
                                   "--global-batch",
                                   "12",
                                   "--steps",
                                   "3",
                                   "--checkpoint-dir",
                                   dir + "/a",
                                   "--master-port",
                                   "0",
                                   "--resume",
                                   fixture};
  args.insert(args.end(), kAdamW.begin(), kAdamW.end());
  RunResult r = mfsdp(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("resumed from " + fixture + " (step 2)\n"), std::string::npos) << r.out;

  const std::string three = plan_for(dir, "three.json", 3);
  r = mfsdp({"reshard", fixture, "--plan", three, "-o", dir + "/b", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(relative_l2(exported(dir + "/b"), exported(fixture)), 0.0);
  r = train(three, 3, 3, dir + "/b", kAdamW, dir + "/b");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// What cannot be mapped is refused before any rank trains, in one line with exit code 2.
TEST(CheckpointReshard, RefusesAnotherModelAnotherOptimizerAndAnExistingOutput) {
  const std::string dir = fresh_dir("refused");
  const std::string fixture = kRepo + "/tests/fixtures/checkpoints/tied_lm_adamw/step-00000002";
  const std::string two = plan_for(dir, "two.json", 2);

  RunResult r = train(two, 2, 4, dir + "/a", kSgd, fixture);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(fixture + " holds adamw optimizer state but this run uses sgd; resume "
                                 "with the optimizer adamw"),
            std::string::npos)
      << r.err;

  const std::string untied = dir + "/untied.json";
  ASSERT_EQ(mfsdp({"plan", "tests/fixtures/untied_lm.pt", "--world-size", "2", "--unit", "<root>",
                   "-o", untied, "-q"})
                .exit_code,
            0);
  r = train(untied, 2, 4, dir + "/a", kAdamW, fixture);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(fixture + " was saved for another model (structural hash "),
            std::string::npos)
      << r.err;
  r = mfsdp({"reshard", fixture, "--plan", untied, "-o", dir + "/b"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("was saved for another model"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/b/step-00000002"));

  ASSERT_EQ(mfsdp({"reshard", fixture, "--plan", two, "-o", dir + "/c", "-q"}).exit_code, 0);
  r = mfsdp({"reshard", fixture, "--plan", two, "-o", dir + "/c"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err, "mfsdp: error: " + dir +
                       "/c/step-00000002 already exists; remove it or "
                       "choose another -o\n");

  r = train(two, 2, 4, dir + "/a", kAdamW, fixture + "/plan.json");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("a checkpoint is a directory, and this is a file"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace mfsdp::testing
