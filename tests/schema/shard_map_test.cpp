// shard_copies: where each element of a rank's shards under one plan comes from under another,
// checked against layouts worked out by hand.

#include "schema/shard_map.h"

#include <gtest/gtest.h>

#include "schema/error.h"

namespace mfsdp::schema {

bool operator==(const ShardCopy& a, const ShardCopy& b) {
  return a.to_group == b.to_group && a.to_offset == b.to_offset && a.from_group == b.from_group &&
         a.from_shard == b.from_shard && a.from_offset == b.from_offset && a.numel == b.numel;
}

void PrintTo(const ShardCopy& c, std::ostream* out) {
  *out << "{to " << c.to_group << "@" << c.to_offset << ", from " << c.from_group << " shard "
       << c.from_shard << "@" << c.from_offset << ", " << c.numel << "}";
}

namespace {

ParamLayout param(const std::string& name, int64_t offset, int64_t numel,
                  std::vector<std::string> aliases = {}) {
  return {name, {numel}, numel, offset, std::move(aliases)};
}

Group group(std::vector<ParamLayout> params, int64_t padded_numel, int64_t shard_size,
            bool requires_grad = true) {
  Group g;
  g.dtype = "float32";
  g.requires_grad = requires_grad;
  g.numel = params.back().offset + params.back().numel;
  g.padded_numel = padded_numel;
  g.shard_numel = padded_numel / shard_size;
  g.params = std::move(params);
  return g;
}

Unit unit(const std::string& name, std::vector<Group> groups) {
  Unit u;
  u.name = name;
  u.groups = std::move(groups);
  return u;
}

Plan plan(int64_t shard_size, std::vector<Unit> units) {
  Plan p;
  p.mesh = {shard_size, shard_size, 1};
  p.units = std::move(units);
  return p;
}

TEST(ShardMap, AParameterMovedToAnotherUnitAndWorldSizeIsFoundByName) {
  // Saved, 2 ranks: one group, w at [0, 6), a gap, b at [8, 11); shard 1 is [6, 12).
  const Plan saved =
      plan(2, {unit("<root>", {group({param("w", 0, 6), param("b", 8, 3)}, 12, 2)})});
  // Target, 3 ranks: b in unit l (one element per rank), w in the root (two per rank).
  const Plan target = plan(3, {unit("l", {group({param("b", 0, 3)}, 3, 3)}),
                               unit("<root>", {group({param("w", 0, 6)}, 6, 3)})});
  EXPECT_EQ(shard_copies(saved, target, 1),
            (std::vector<ShardCopy>{{1, 0, 0, 0, 2, 2}, {0, 0, 0, 1, 3, 1}}));
  EXPECT_EQ(saved_shards_read(shard_copies(saved, target, 1)), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(shard_copies(saved, target, 0),
            (std::vector<ShardCopy>{{1, 0, 0, 0, 0, 2}, {0, 0, 0, 1, 2, 1}}));
}

TEST(ShardMap, OneTargetShardGathersRunsFromEverySavedShard) {
  const Plan saved = plan(3, {unit("<root>", {group({param("w", 0, 6)}, 6, 3)})});
  const Plan target = plan(1, {unit("<root>", {group({param("w", 0, 6)}, 8, 1)})});
  EXPECT_EQ(shard_copies(saved, target, 0),
            (std::vector<ShardCopy>{{0, 0, 0, 0, 0, 2}, {0, 2, 0, 1, 0, 2}, {0, 4, 0, 2, 0, 2}}));
}

TEST(ShardMap, AdjacentParametersLaidOutAlikeAreOneRun) {
  const Group both = group({param("a", 0, 4), param("b", 4, 4)}, 8, 1);
  const Plan saved = plan(1, {unit("<root>", {both})});
  EXPECT_EQ(shard_copies(saved, saved, 0), (std::vector<ShardCopy>{{0, 0, 0, 0, 0, 8}}));
}

TEST(ShardMap, FrozenGroupsAreNotCountedAmongTheTrainableOnes) {
  const Plan saved =
      plan(1, {unit("<root>", {group({param("frozen", 0, 4)}, 4, 1, /*requires_grad=*/false),
                               group({param("w", 0, 4)}, 4, 1)})});
  const Plan target = plan(1, {unit("<root>", {group({param("w", 0, 4)}, 4, 1)})});
  EXPECT_EQ(shard_copies(saved, target, 0), (std::vector<ShardCopy>{{0, 0, 0, 0, 0, 4}}));
  EXPECT_EQ(trainable_shard_numels(saved), (std::vector<int64_t>{4}));
}

TEST(ShardMap, ATiedWeightIsFoundUnderItsOtherName) {
  // The unit owning a tied weight decides which of its names comes first.
  const Plan saved = plan(1, {unit("<root>", {group({param("wte", 0, 4, {"head"})}, 4, 1)})});
  const Plan target = plan(2, {unit("head", {group({param("head", 0, 4, {"wte"})}, 4, 2)})});
  EXPECT_EQ(shard_copies(saved, target, 1), (std::vector<ShardCopy>{{0, 0, 0, 0, 2, 2}}));
}

TEST(ShardMap, RefusesAParameterTheCheckpointDoesNotTrain) {
  const Plan saved = plan(1, {unit("<root>", {group({param("w", 0, 4)}, 4, 1, false)})});
  const Plan target = plan(1, {unit("<root>", {group({param("w", 0, 4)}, 4, 1)})});
  try {
    shard_copies(saved, target, 0);
    FAIL() << "expected mfsdp::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kUsage);
    EXPECT_STREQ(error.what(),
                 "parameter w is trained by the new plan but the checkpoint's plan holds no "
                 "trained parameter of that name; reshard only between plans of the same model");
  }
}

TEST(ShardMap, RefusesAParameterOfAnotherShape) {
  const Plan saved = plan(1, {unit("<root>", {group({param("w", 0, 4)}, 4, 1)})});
  Plan target = saved;
  target.units[0].groups[0].params[0].shape = {2, 2};
  EXPECT_THROW(shard_copies(saved, target, 0), Error);
}

}  // namespace
}  // namespace mfsdp::schema
