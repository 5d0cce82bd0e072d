#include "planner/torchscript/page_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>

namespace mfsdp::host_memory {
namespace {

size_t round_up(size_t bytes, size_t to) {
  return (bytes + to - 1) / to * to;
}

void* fail_as_null(void* p) {
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

PagePool::~PagePool() {
  for (const auto& [bytes, fragment] : free_) ::munmap(fragment.addr, bytes);
}

// Address space only (no pages, no commitment): the fragments and fresh pages of a block are
// moved or mapped over it. A block of kHugePage or more starts on a huge-page boundary, so
// that its fresh pages can be huge pages.
char* PagePool::reserve(size_t bytes) {
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (bytes < kHugePage) {
    return static_cast<char*>(fail_as_null(::mmap(nullptr, bytes, PROT_NONE, flags, -1, 0)));
  }
  const size_t span = bytes + kHugePage;
  char* base = static_cast<char*>(fail_as_null(::mmap(nullptr, span, PROT_NONE, flags, -1, 0)));
  if (!base) return nullptr;
  char* start = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(base), kHugePage));
  if (start > base) ::munmap(base, static_cast<size_t>(start - base));
  char* end = start + bytes;
  if (base + span > end) ::munmap(end, static_cast<size_t>(base + span - end));
  return start;
}

bool PagePool::fill_fresh(char* at, size_t bytes) {
  void* p =
      ::mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) return false;
  // Fresh pages fault in one by one; with 4 KiB pages that cost GPT-2 small a quarter of its
  // step when every block was fresh, with transparent huge pages nothing measurable.
  if (bytes >= kHugePage) ::madvise(at, bytes, MADV_HUGEPAGE);
  fresh_bytes_ += static_cast<int64_t>(bytes);
  return true;
}

// The block's bytes from, in order of preference: one free fragment of exactly its size; the
// longest free fragments that fit into what is still missing, moved one after another into a
// reserved range; a piece of the shortest longer fragment; fresh pages. Each fragment lies
// within one mapping (mremap moves only such ranges), so `parts` lists the mappings.
char* PagePool::assemble(size_t bytes, std::vector<size_t>& parts) {
  const auto exact = free_.find(bytes);
  if (exact != free_.end()) {
    char* addr = exact->second.addr;
    free_.erase(exact);
    free_bytes_ -= bytes;
    moved_bytes_ += static_cast<int64_t>(bytes);
    parts.push_back(bytes);
    return addr;
  }
  char* dest = reserve(bytes);
  if (!dest) return nullptr;
  size_t at = 0;
  while (at < bytes) {
    const size_t missing = bytes - at;
    if (free_.empty() || parts.size() + 1 >= kMaxParts) break;
    auto it = free_.upper_bound(missing);
    const bool whole = it != free_.begin();
    if (!whole && mappings_ >= kMaxMappings) break;  // a split would add a mapping
    it = whole ? std::prev(it) : free_.begin();
    const size_t length = whole ? it->first : missing;
    char* from = whole ? it->second.addr : it->second.addr + (it->first - missing);
    if (::mremap(from, length, length, MREMAP_MAYMOVE | MREMAP_FIXED, dest + at) == MAP_FAILED) {
      break;  // e.g. vm.max_map_count reached: the rest is fresh
    }
    const Fragment rest = it->second;
    const size_t rest_bytes = it->first - length;
    free_.erase(it);
    free_bytes_ -= length;
    if (rest_bytes > 0) {
      free_.emplace(rest_bytes, rest);
      ++mappings_;
    }
    moved_bytes_ += static_cast<int64_t>(length);
    parts.push_back(length);
    at += length;
  }
  if (at < bytes) {
    if (!fill_fresh(dest + at, bytes - at)) {
      ::munmap(dest, bytes);  // the moved fragments too: their pages are given back
      mappings_ -= parts.size();
      return nullptr;
    }
    parts.push_back(bytes - at);
    ++mappings_;
  }
  return dest;
}

void* PagePool::take(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t rounded = round_up(bytes, kPage);
  std::lock_guard<std::mutex> lock(mutex_);
  Block block{bytes, rounded, {}};
  char* addr = assemble(rounded, block.parts);
  if (!addr) return nullptr;
  live_bytes_ += rounded;
  ceiling_ = std::max(ceiling_, live_bytes_);
  live_.emplace(addr, std::move(block));
  keep_within_ceiling();
  return addr;
}

size_t PagePool::give(void* data) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = live_.find(data);
  if (it == live_.end()) return 0;
  const size_t asked = it->second.asked;
  char* addr = static_cast<char*>(data);
  for (const size_t length : it->second.parts) {
    add_free(addr, length, steps_);
    addr += length;
  }
  live_bytes_ -= it->second.bytes;
  live_.erase(it);
  keep_within_ceiling();
  return asked;
}

bool PagePool::owns(const void* data) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_.count(data) > 0;
}

void PagePool::add_free(char* addr, size_t bytes, uint64_t freed_at) {
  free_.emplace(bytes, Fragment{addr, freed_at});
  free_bytes_ += bytes;
}

void PagePool::unmap_free(std::multimap<size_t, Fragment>::iterator it) {
  ::munmap(it->second.addr, it->first);
  --mappings_;
  free_bytes_ -= it->first;
  free_.erase(it);
}

// Live + free never exceeds the ceiling, and the fragments stay few: the shortest go first,
// being the least use to a later request.
void PagePool::keep_within_ceiling() {
  const size_t room = ceiling_ - live_bytes_;
  while (!free_.empty() &&
         (free_bytes_ > room || free_.size() > kMaxFreeFragments || mappings_ > kMaxMappings)) {
    unmap_free(free_.begin());
  }
}

void PagePool::end_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++steps_;
  for (auto it = free_.begin(); it != free_.end();) {
    auto next = std::next(it);
    if (steps_ - it->second.freed_at > kStaleSteps) unmap_free(it);
    it = next;
  }
}

void PagePool::release() {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!free_.empty()) unmap_free(free_.begin());
  ceiling_ = live_bytes_;
}

PagePool::Counts PagePool::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Counts c;
  c.live_bytes = static_cast<int64_t>(live_bytes_);
  c.free_bytes = static_cast<int64_t>(free_bytes_);
  c.ceiling_bytes = static_cast<int64_t>(ceiling_);
  c.fresh_bytes = fresh_bytes_;
  c.moved_bytes = moved_bytes_;
  c.free_fragments = static_cast<int64_t>(free_.size());
  c.mappings = static_cast<int64_t>(mappings_);
  return c;
}

int64_t PagePool::free_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(free_bytes_);
}

}  // namespace mfsdp::host_memory
