// The store's count of strangers by address (executor/comm/store_strangers.h): which address
// gives up a place when they are full, and how many places there are.

#include "executor/comm/store_strangers.h"

#include <sys/resource.h>

#include <gtest/gtest.h>

#include <algorithm>

namespace mfsdp::executor {
namespace {

StoreLimits with_places(size_t n) {
  StoreLimits limits;
  limits.max_strangers = n;
  return limits;
}

TEST(StrangerPlaces, TheAddressHoldingTheMostGivesUpAPlace) {
  StrangerPlaces s(with_places(4));
  EXPECT_FALSE(s.most_held_address());
  s.admit("10.0.0.9");
  s.admit("10.0.0.1");
  s.admit("10.0.0.1");
  EXPECT_FALSE(s.full());
  s.admit("10.0.0.9");
  EXPECT_TRUE(s.full());
  // Two each: the first address in order.
  EXPECT_EQ(s.most_held_address().value_or(""), "10.0.0.1");
  s.release("10.0.0.1");
  EXPECT_FALSE(s.full());
  EXPECT_EQ(s.most_held_address().value_or(""), "10.0.0.9");
  s.release("10.0.0.9");
  s.release("10.0.0.9");
  s.release("10.0.0.1");
  EXPECT_FALSE(s.most_held_address());
  EXPECT_EQ(s.most_held(), 4u);  // the high-water mark stays
}

TEST(StrangerPlaces, WithoutALimitAQuarterOfTheDescriptorsBetween16And1024) {
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  const size_t expected =
      files.rlim_cur == RLIM_INFINITY
          ? 1024
          : std::clamp<size_t>(static_cast<size_t>(files.rlim_cur) / 4, 16, 1024);
  EXPECT_EQ(StrangerPlaces(with_places(0)).places(), expected);
  EXPECT_EQ(StrangerPlaces(with_places(3)).places(), 3u);
}

}  // namespace
}  // namespace mfsdp::executor
