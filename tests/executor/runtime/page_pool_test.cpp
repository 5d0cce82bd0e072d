// The page pool under the counting CPU allocator (planner/torchscript/page_pool.h): freed
// pages serve later blocks of any size without fresh pages, live + free never exceeds the
// high-water mark of live bytes, stale fragments go back to the kernel, and threads can share
// it. Torch-free, so that it runs in the sanitized suite.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "planner/torchscript/page_pool.h"

namespace mfsdp::host_memory {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

void expect_within_ceiling(const PagePool& pool) {
  const PagePool::Counts c = pool.counts();
  EXPECT_LE(c.live_bytes + c.free_bytes, c.ceiling_bytes);
}

TEST(PagePool, HandsFreedPagesToABlockOfAnotherSizeByMovingThem) {
  PagePool pool;
  auto* a = static_cast<unsigned char*>(pool.take(1 * kMiB));
  auto* b = static_cast<unsigned char*>(pool.take(3 * kMiB));
  ASSERT_TRUE(a && b);
  std::memset(a, 0xA1, 1 * kMiB);
  std::memset(b, 0xB3, 3 * kMiB);
  const int64_t fresh = pool.counts().fresh_bytes;
  EXPECT_EQ(fresh, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(pool.give(a), 1 * kMiB);
  EXPECT_EQ(pool.give(b), 3 * kMiB);
  EXPECT_EQ(pool.counts().free_bytes, static_cast<int64_t>(4 * kMiB));

  // One 4 MiB block out of a 1 MiB and a 3 MiB fragment: no page is fresh, and the block
  // holds the old pages' bytes (moved, not zero-filled again).
  auto* c = static_cast<unsigned char*>(pool.take(4 * kMiB));
  ASSERT_TRUE(c);
  EXPECT_EQ(pool.counts().fresh_bytes, fresh);
  EXPECT_EQ(pool.counts().free_bytes, 0);
  size_t a_bytes = 0, b_bytes = 0;
  for (size_t i = 0; i < 4 * kMiB; ++i) {
    a_bytes += c[i] == 0xA1;
    b_bytes += c[i] == 0xB3;
  }
  EXPECT_EQ(a_bytes, 1 * kMiB);
  EXPECT_EQ(b_bytes, 3 * kMiB);
  c[0] = 1;
  c[4 * kMiB - 1] = 2;  // the whole block is writable
  EXPECT_EQ(pool.give(c), 4 * kMiB);
}

TEST(PagePool, SplitsALongerFragmentForWhatTheShorterOnesLeaveMissing) {
  PagePool pool;
  void* big = pool.take(8 * kMiB);
  ASSERT_TRUE(big);
  pool.give(big);
  void* small = pool.take(3 * kMiB + 100);  // rounded up to pages
  ASSERT_TRUE(small);
  PagePool::Counts c = pool.counts();
  EXPECT_EQ(c.fresh_bytes, static_cast<int64_t>(8 * kMiB));
  EXPECT_EQ(c.live_bytes, static_cast<int64_t>(3 * kMiB + PagePool::kPage));
  EXPECT_EQ(c.free_bytes, static_cast<int64_t>(5 * kMiB - PagePool::kPage));
  EXPECT_EQ(c.free_fragments, 1);
  // What the free fragment cannot cover is fresh: 6 MiB = the 5 MiB - 4 KiB left + fresh.
  void* more = pool.take(6 * kMiB);
  ASSERT_TRUE(more);
  c = pool.counts();
  EXPECT_EQ(c.free_bytes, 0);
  EXPECT_EQ(c.fresh_bytes, static_cast<int64_t>(8 * kMiB + 1 * kMiB + PagePool::kPage));
  EXPECT_EQ(c.ceiling_bytes, c.live_bytes);
  pool.give(small);
  pool.give(more);
}

TEST(PagePool, StartsLargeFreshBlocksOnAHugePageBoundary) {
  PagePool pool;
  void* p = pool.take(5 * kMiB);
  ASSERT_TRUE(p);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % PagePool::kHugePage, 0u);
  void* q = pool.take(200 * 1024);
  ASSERT_TRUE(q);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % PagePool::kPage, 0u);
  pool.give(p);
  pool.give(q);
}

// Whatever the order of sizes, the pool holds at most what was once live at the same time.
TEST(PagePool, LiveAndFreeBytesNeverExceedTheLiveHighWaterMark) {
  PagePool pool;
  std::mt19937 random(7);
  std::uniform_int_distribution<size_t> size(1, 6 * kMiB);
  std::vector<void*> live;
  int64_t most_live = 0;
  for (int i = 0; i < 400; ++i) {
    if (live.empty() || random() % 3 != 0) {
      void* p = pool.take(size(random));
      ASSERT_TRUE(p);
      static_cast<char*>(p)[0] = 1;
      live.push_back(p);
    } else {
      const size_t k = random() % live.size();
      EXPECT_GT(pool.give(live[k]), 0u);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    const PagePool::Counts c = pool.counts();
    most_live = std::max(most_live, c.live_bytes);
    EXPECT_EQ(c.ceiling_bytes, most_live);
    EXPECT_LE(c.live_bytes + c.free_bytes, c.ceiling_bytes);
  }
  for (void* p : live) pool.give(p);
  // Every page kept serves a later block: taking all of them again needs no fresh page.
  const PagePool::Counts before = pool.counts();
  EXPECT_EQ(before.mappings, before.free_fragments);  // every mapping is a free fragment now
  std::vector<void*> again;
  for (int64_t taken = 0; taken < before.free_bytes; taken += 16 * kMiB) {
    again.push_back(pool.take(std::min<size_t>(16 * kMiB, before.free_bytes - taken)));
  }
  EXPECT_EQ(pool.counts().fresh_bytes, before.fresh_bytes);
  EXPECT_EQ(pool.counts().free_bytes, 0);
  for (void* p : again) pool.give(p);
}

TEST(PagePool, UnmapsFragmentsNotReusedForTwoSteps) {
  static_assert(PagePool::kStaleSteps == 2);
  PagePool pool;
  void* kept = pool.take(1 * kMiB);
  void* stale = pool.take(2 * kMiB);
  pool.give(stale);
  pool.give(kept);
  pool.end_step();
  pool.end_step();
  EXPECT_EQ(pool.counts().free_bytes, static_cast<int64_t>(3 * kMiB));
  kept = pool.take(1 * kMiB);  // the 1 MiB fragment is reused, and freed again this step
  pool.give(kept);
  pool.end_step();  // the 2 MiB fragment has been free for three step ends
  PagePool::Counts c = pool.counts();
  EXPECT_EQ(c.free_bytes, static_cast<int64_t>(1 * kMiB));
  EXPECT_EQ(c.free_fragments, 1);
  pool.end_step();
  pool.end_step();
  EXPECT_EQ(pool.counts().free_bytes, 0);
}

TEST(PagePool, ReleaseUnmapsEverythingFreeAndRestartsTheCeiling) {
  PagePool pool;
  void* a = pool.take(4 * kMiB);
  void* b = pool.take(1 * kMiB);
  pool.give(a);
  EXPECT_EQ(pool.counts().ceiling_bytes, static_cast<int64_t>(5 * kMiB));
  pool.release();
  PagePool::Counts c = pool.counts();
  EXPECT_EQ(c.free_bytes, 0);
  EXPECT_EQ(c.ceiling_bytes, static_cast<int64_t>(1 * kMiB));
  pool.give(b);
  expect_within_ceiling(pool);
}

TEST(PagePool, KeepsAtMostItsLimitOfFreeFragments) {
  PagePool pool;
  std::vector<void*> pages;
  for (size_t i = 0; i < PagePool::kMaxFreeFragments + 50; ++i) {
    pages.push_back(pool.take(PagePool::kPage));
  }
  for (void* p : pages) pool.give(p);
  EXPECT_EQ(pool.counts().free_fragments, static_cast<int64_t>(PagePool::kMaxFreeFragments));
}

TEST(PagePool, RefusesPointersItDidNotGive) {
  PagePool pool;
  alignas(4096) static char elsewhere[4096];
  EXPECT_EQ(pool.give(elsewhere), 0u);
  EXPECT_FALSE(pool.owns(elsewhere));
  EXPECT_EQ(pool.take(0), nullptr);
  void* p = pool.take(10);
  EXPECT_TRUE(pool.owns(p));
  EXPECT_EQ(pool.give(p), 10u);
  EXPECT_EQ(pool.give(p), 0u);  // given back twice: the second time is not its block
}

// Threads taking and giving blocks of many sizes at once: no block is handed out twice (each
// thread's bytes survive until it gives them back), and the counts add up at the end.
TEST(PagePool, ThreadsShareItWithoutHandingOutABlockTwice) {
  PagePool pool;
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<int> corrupted(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&pool, &corrupted, t] {
      std::mt19937 random(static_cast<unsigned>(100 + t));
      const size_t sizes[] = {PagePool::kPage, 130 * 1024, 700 * 1024, 2 * kMiB, 3 * kMiB + 5};
      std::vector<std::pair<unsigned char*, size_t>> mine;
      const auto mark = static_cast<unsigned char>(t + 1);
      for (int i = 0; i < 600; ++i) {
        if (mine.size() < 6 && (mine.empty() || random() % 2 == 0)) {
          const size_t bytes = sizes[random() % 5];
          auto* p = static_cast<unsigned char*>(pool.take(bytes));
          if (!p) continue;
          std::memset(p, mark, bytes);
          mine.emplace_back(p, bytes);
        } else {
          const size_t k = random() % mine.size();
          auto [p, bytes] = mine[k];
          for (size_t j = 0; j < bytes; j += 509) corrupted[t] += p[j] != mark;
          corrupted[t] += p[bytes - 1] != mark;
          if (pool.give(p) != bytes) ++corrupted[t];
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
      for (auto [p, bytes] : mine) pool.give(p);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(corrupted[t], 0) << "thread " << t;
  const PagePool::Counts c = pool.counts();
  EXPECT_EQ(c.live_bytes, 0);
  EXPECT_LE(c.free_bytes, c.ceiling_bytes);
  EXPECT_GT(c.moved_bytes, 0);
}

}  // namespace
}  // namespace mfsdp::host_memory
