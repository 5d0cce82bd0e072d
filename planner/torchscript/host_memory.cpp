#include "planner/torchscript/host_memory.h"

#include "planner/torchscript/page_pool.h"

#include <malloc.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include <c10/core/CPUAllocator.h>

namespace mfsdp::host_memory {
namespace {

std::atomic<int64_t> live{0};
std::atomic<int64_t> peak{0};
std::atomic<int64_t> cached_at_peak{0};
std::atomic<int64_t> from_malloc{0};  // usable bytes of the blocks tensors took from malloc
std::atomic<bool> is_installed{false};
constexpr size_t kPoolFrom = static_cast<size_t>(kPooledBytes);

// Small blocks come from malloc with a header in front that remembers their size, so the
// deleter (which LibTorch calls with the data pointer alone for raw allocations) can count
// them. The header is 64 bytes in a 128-byte aligned block, so that data is 64-byte aligned
// (as LibTorch's own CPU allocator aligns) and never on a page boundary, where the pool's
// blocks always are: the deleter tells the two apart by the pointer alone.
constexpr size_t kAlignment = 64;
constexpr size_t kHeader = 64;
constexpr size_t kBlockAlignment = 128;
constexpr uintptr_t kPageMask = PagePool::kPage - 1;
// The header's tag is this xor the data's address: a pointer this allocator did not make (a
// raw allocation of the allocator installed before, freed after install()) is told apart
// instead of being read as a size.
constexpr uint64_t kTagKey = 0x6d667364702d686dULL;

struct Header {
  uint64_t tag;
  uint64_t bytes;
};
static_assert(sizeof(Header) <= kHeader);

uint64_t tag_of(const void* data) {
  return kTagKey ^ static_cast<uint64_t>(reinterpret_cast<uintptr_t>(data));
}

// Never destroyed: tensors that static objects hold are freed after every destructor ran.
PagePool& pool() {
  static PagePool* instance = new PagePool();
  return *instance;
}

// The allocator install() replaced, whose raw blocks may still be freed through ours.
std::atomic<c10::DeleterFnPtr> previous_deleter{nullptr};

void add(int64_t bytes) {
  const int64_t now = live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen) {
    if (peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
      cached_at_peak.store(pool().free_bytes(), std::memory_order_relaxed);
      break;
    }
  }
}

void release_foreign(void* data) {
  if (c10::DeleterFnPtr deleter = previous_deleter.load(std::memory_order_relaxed)) {
    deleter(data);
  }
}

void release(void* data) {
  if (!data) return;
  const uintptr_t address = reinterpret_cast<uintptr_t>(data);
  if ((address & kPageMask) == 0) {
    const size_t bytes = pool().give(data);
    if (bytes == 0) return release_foreign(data);
    live.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    return;
  }
  // A header in the same page as data, or none: this allocator's small blocks start at 64 or
  // more bytes into a page, so reading 64 bytes before them never leaves the page.
  if ((address & kPageMask) < kHeader) return release_foreign(data);
  char* block = static_cast<char*>(data) - kHeader;
  const Header header = *reinterpret_cast<const Header*>(block);
  if (header.tag != tag_of(data)) return release_foreign(data);
  live.fetch_sub(static_cast<int64_t>(header.bytes), std::memory_order_relaxed);
  from_malloc.fetch_sub(static_cast<int64_t>(::malloc_usable_size(block)),
                        std::memory_order_relaxed);
  std::free(block);
}

c10::DataPtr allocate_counted(size_t bytes) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (bytes == 0) return {nullptr, nullptr, &release, cpu};
  void* data = nullptr;
  if (bytes >= kPoolFrom) {
    data = pool().take(bytes);
  } else {
    void* block = nullptr;
    if (::posix_memalign(&block, kBlockAlignment, bytes + kHeader) == 0) {
      from_malloc.fetch_add(static_cast<int64_t>(::malloc_usable_size(block)),
                            std::memory_order_relaxed);
      data = static_cast<char*>(block) + kHeader;
      *static_cast<Header*>(block) = Header{tag_of(data), bytes};
    }
  }
  if (!data) throw std::bad_alloc();
  add(static_cast<int64_t>(bytes));
  return {data, data, &release, cpu};
}

// LibTorch 1.13 declares `allocate` const and has no `copy_data`; 2.3 and later declare
// `allocate` non-const and `copy_data` pure. Both spellings are here, so each version finds
// its overrides (hence no `override` on any of them).
class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) const { return allocate_counted(bytes); }
  c10::DataPtr allocate(size_t bytes) { return allocate_counted(bytes); }
  c10::DeleterFnPtr raw_deleter() const { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const {
    std::memcpy(dest, src, count);
  }
};

CountingAllocator counting_allocator;

// A meta tensor's storage has no data; its context is its size, which its deleter uncounts.
void release_meta(void* context) {
  live.fetch_sub(static_cast<int64_t>(reinterpret_cast<uintptr_t>(context)),
                 std::memory_order_relaxed);
}

c10::DataPtr allocate_meta(size_t bytes) {
  const c10::Device meta(c10::DeviceType::Meta);
  if (bytes == 0) return {nullptr, nullptr, &release_meta, meta};
  add(static_cast<int64_t>(bytes));
  return {nullptr, reinterpret_cast<void*>(static_cast<uintptr_t>(bytes)), &release_meta, meta};
}

// As CountingAllocator, for LibTorch 1.13's and 2.x's spellings.
class MetaAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) const { return allocate_meta(bytes); }
  c10::DataPtr allocate(size_t bytes) { return allocate_meta(bytes); }
  c10::DeleterFnPtr raw_deleter() const { return nullptr; }
  void copy_data(void* /*dest*/, const void* /*src*/, std::size_t /*count*/) const {}
};

MetaAllocator meta_allocator;
std::atomic<bool> meta_installed{false};

int64_t status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  const std::string prefix = std::string(field) + ":";
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::atoll(line.c_str() + prefix.size());
  }
  return 0;
}

}  // namespace

void install() {
  if (is_installed.exchange(true)) return;
  if (c10::Allocator* before = c10::GetCPUAllocator()) {
    previous_deleter.store(before->raw_deleter(), std::memory_order_relaxed);
  }
  c10::SetCPUAllocator(&counting_allocator, /*priority=*/1);
}

void install_meta() {
  if (meta_installed.exchange(true)) return;
  c10::SetAllocator(c10::DeviceType::Meta, &meta_allocator, /*priority=*/1);
}

void end_step() {
  pool().end_step();
}

void release_cache() {
  pool().release();
}

PoolCounts pool_counts() {
  const PagePool::Counts c = pool().counts();
  return {c.free_bytes, c.ceiling_bytes, c.fresh_bytes, c.moved_bytes};
}

int64_t tensor_bytes() {
  return live.load(std::memory_order_relaxed);
}

int64_t peak_tensor_bytes() {
  return peak.load(std::memory_order_relaxed);
}

void reset_peak() {
  peak.store(live.load(std::memory_order_relaxed), std::memory_order_relaxed);
  cached_at_peak.store(pool().free_bytes(), std::memory_order_relaxed);
}

int64_t cached_bytes() {
  return pool().free_bytes();
}

int64_t cached_at_peak_bytes() {
  return cached_at_peak.load(std::memory_order_relaxed);
}

int64_t heap_object_bytes() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 info = ::mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd) -
         from_malloc.load(std::memory_order_relaxed);
#else
  return 0;
#endif
}

int64_t rss_bytes() {
  return status_kb("VmRSS") * 1024;
}

int64_t peak_rss_bytes() {
  return status_kb("VmHWM") * 1024;
}

int64_t file_rss_bytes() {
  return status_kb("RssFile") * 1024;
}

int64_t minor_faults() {
  struct rusage usage {};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_minflt);
}

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace mfsdp::host_memory
