#pragma once
// The pages of large host tensors, kept between steps without raising the peak.
//
// A training step allocates and frees the same large blocks as the step before it. Mapping
// each one fresh from the kernel and unmapping it on free (as mfsdp did until 0ac1070) zero-
// fills every page again on every step: 280 MiB per rank and step at a 14 M-parameter GPT,
// 14 % of its step. Keeping freed blocks for the next request of the same size would help
// only as far as sizes repeat; a pool that may hold anything also raises resident memory.
//
// This pool does neither. Freed blocks stay mapped (with their pages) as free fragments, and
// a request is served, in order, by a free fragment of exactly its size, by free fragments
// moved next to each other into one contiguous block with mremap(2) (the pages move, they are
// neither copied nor faulted again), by a piece split off a larger fragment, and only for what
// is still missing by fresh pages. So the pages a step frees serve the next step's requests
// whatever their sizes. And the pool never holds more than the ceiling allows: free bytes are
// at most the largest total of live block bytes seen since the last release() less the live
// block bytes now, so live + free never exceeds that high-water mark, and a step's peak is
// what it would be without the pool. Fragments not reused for kStaleSteps steps are unmapped
// by end_step().
//
// Thread-safe. No LibTorch here: the counting CPU allocator (host_memory.h) sits on top.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace mfsdp::host_memory {

class PagePool {
 public:
  static constexpr size_t kPage = 4096;
  // Blocks of at least this size start at a 2 MiB boundary and ask for transparent huge pages.
  static constexpr size_t kHugePage = size_t{2} << 20;
  // Fragments returned and then left unused for this many end_step() calls are unmapped.
  static constexpr uint64_t kStaleSteps = 2;
  // At most this many free fragments are kept (each is a mapping, and a process may have only
  // vm.max_map_count of those); the smallest go first.
  static constexpr size_t kMaxFreeFragments = 4096;
  // A block is assembled from at most this many fragments; the rest of it is fresh pages.
  static constexpr size_t kMaxParts = 256;
  // At most this many mappings in all (free fragments and the parts of live blocks), half of
  // Linux's default vm.max_map_count: beyond it no fragment is split, and free ones go first.
  static constexpr size_t kMaxMappings = 32768;

  PagePool() = default;
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;
  ~PagePool();  // unmaps the free fragments; live blocks stay mapped

  // A page-aligned block of at least `bytes` (rounded up to pages); nullptr for 0 bytes and
  // when the kernel refuses memory.
  void* take(size_t bytes);
  // Returns a block take() gave, and the bytes take() was asked for; 0 (and nothing done) for
  // a pointer it did not give.
  size_t give(void* data);
  // Whether `data` is a live block of this pool.
  bool owns(const void* data) const;

  // One training step ended: unmaps the fragments that have been free for kStaleSteps steps.
  void end_step();
  // Unmaps every free fragment and restarts the ceiling from the live block bytes now.
  void release();

  struct Counts {
    int64_t live_bytes = 0;     // page-rounded bytes of the live blocks
    int64_t free_bytes = 0;     // bytes of the free fragments (resident, belonging to no block)
    int64_t ceiling_bytes = 0;  // the most live bytes seen since release(): live + free <= it
    int64_t fresh_bytes = 0;    // bytes ever mapped fresh (each faults in on first touch)
    int64_t moved_bytes = 0;    // bytes ever handed out again from free fragments
    int64_t free_fragments = 0;
    int64_t mappings = 0;  // free fragments and the parts of live blocks
  };
  Counts counts() const;
  int64_t free_bytes() const;

 private:
  struct Fragment {
    char* addr;
    uint64_t freed_at;  // the step count when it became free
  };
  struct Block {
    size_t asked;
    size_t bytes;
    std::vector<size_t> parts;  // lengths of the mappings it is made of, from its start
  };

  char* assemble(size_t bytes, std::vector<size_t>& parts);
  char* reserve(size_t bytes);
  bool fill_fresh(char* at, size_t bytes);
  void add_free(char* addr, size_t bytes, uint64_t freed_at);
  void unmap_free(std::multimap<size_t, Fragment>::iterator it);
  void keep_within_ceiling();

  mutable std::mutex mutex_;
  std::unordered_map<const void*, Block> live_;
  std::multimap<size_t, Fragment> free_;  // by length
  size_t mappings_ = 0;
  size_t live_bytes_ = 0;
  size_t free_bytes_ = 0;
  size_t ceiling_ = 0;
  uint64_t steps_ = 0;
  int64_t fresh_bytes_ = 0;
  int64_t moved_bytes_ = 0;
};

}  // namespace mfsdp::host_memory
