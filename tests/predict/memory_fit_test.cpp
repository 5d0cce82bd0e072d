// A rank's memory term by term and against a budget (predict/memory_fit.h), on tied_lm's
// golden plan with round numbers put in its memory section, so every figure is checked by hand.
#include <gtest/gtest.h>

#include "predict/memory_fit.h"
#include "schema/plan_json.h"
#include "tests/planner/test_support.h"  // EXPECT_MFSDP_ERROR

namespace mfsdp::predict {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// World 2 (shard 2); per rank 100 MiB of parameters and of gradients, 50 MiB of slots, and a
// trace of 2 samples whose peak is 400 MiB: the root saves 100 MiB, layers.0 200, layers.1 -10
// (it frees more than it keeps), and layers.1 is checkpointed.
schema::Plan sample() {
  schema::ParseResult r =
      schema::read_plan_file(std::string(MFSDP_SOURCE_DIR) + "/plans/tied_lm.plan.json");
  EXPECT_TRUE(r.problems.empty());
  schema::Plan plan = r.plan;
  plan.memory.sharded_param_bytes = 100 * kMiB;
  plan.memory.sharded_grad_bytes = 100 * kMiB;
  plan.memory.slot_bytes = 50 * kMiB;
  schema::Activations a;
  a.microbatch = 2;
  a.peak_bytes = 400 * kMiB;
  a.units = {{"<root>", 100 * kMiB}, {"layers.0", 200 * kMiB}, {"layers.1", -10 * kMiB}};
  plan.memory.activations = a;
  for (schema::Unit& u : plan.units) u.checkpoint = u.name == "layers.1";
  return plan;
}

TEST(MemoryFit, CountsEachTermWithTheOptimizersStateAndScaledActivations) {
  const schema::Plan plan = sample();
  const RankMemory adamw = rank_memory(plan, "adamw", 4);
  EXPECT_EQ(adamw.parameters, 100 * kMiB);
  EXPECT_EQ(adamw.gradients, 100 * kMiB);
  EXPECT_EQ(adamw.optimizer_state, 200 * kMiB);  // two buffers
  EXPECT_EQ(adamw.slots, 50 * kMiB);
  EXPECT_EQ(adamw.activations, 800 * kMiB);  // twice the traced samples
  EXPECT_EQ(adamw.total(), 1250 * kMiB);
  EXPECT_EQ(rank_memory(plan, "sgd", 2).optimizer_state, 100 * kMiB);
  EXPECT_MFSDP_ERROR(rank_memory(plan, "lamb", 2), ExitCode::kUsage, "optimizer 'lamb' is not");
}

TEST(MemoryFit, AFittingPlanSaysHowMuchIsLeft) {
  const schema::Plan plan = sample();
  const MemoryFit fit = fit_memory(plan, rank_memory(plan, "adamw", 2), 1000 * kMiB, 2);
  EXPECT_EQ(fit.over, (850 - 1000) * kMiB);
  EXPECT_EQ(fit.largest, "activations");
  EXPECT_FALSE(fit.shard_size.has_value());
}

// At 4 samples a rank holds 1250 MiB against a 1000 MiB budget: 250 over.
TEST(MemoryFit, SaysWhatWouldMakeAnOversizedRankFit) {
  const schema::Plan plan = sample();
  const MemoryFit fit = fit_memory(plan, rank_memory(plan, "adamw", 4), 1000 * kMiB, 4);
  EXPECT_EQ(fit.over, 250 * kMiB);
  EXPECT_EQ(fit.largest, "activations");
  // 850 MiB of slots and activations stay; the 400 MiB sharded over 2 ranks must drop to 150:
  // 2 x 4 = 8 ranks give 100.
  EXPECT_EQ(fit.shard_size, 8);
  EXPECT_FALSE(fit.fits_unreplicated);  // not HSDP
  // The root and layers.0 are not checkpointed: 300 MiB saved at 2 samples, 600 at 4.
  EXPECT_EQ(fit.uncheckpointed_units, 2);
  EXPECT_EQ(fit.checkpoint_frees_at_most, 600 * kMiB);
  EXPECT_TRUE(fit.checkpointing_may_fit);
  // 1000 - 400 - 50 = 550 MiB for activations of 200 MiB a sample: 2 samples.
  EXPECT_EQ(fit.microbatch_samples, 2);
}

TEST(MemoryFit, MoreRanksCannotShrinkSlotsAndActivations) {
  schema::Plan plan = sample();
  plan.mesh = {8, 4, 2};  // HSDP: 4-way shards, 2 replicas
  const RankMemory m = rank_memory(plan, "adamw", 4);
  MemoryFit fit = fit_memory(plan, m, 800 * kMiB, 4);  // 850 MiB of slots and activations
  EXPECT_FALSE(fit.shard_size.has_value());
  EXPECT_FALSE(fit.fits_unreplicated);
  fit = fit_memory(plan, m, 1060 * kMiB, 4);  // 190 over; sharding 4 -> 8 leaves 200
  EXPECT_TRUE(fit.fits_unreplicated);
  EXPECT_EQ(fit.shard_size, 8);
}

}  // namespace
}  // namespace mfsdp::predict
