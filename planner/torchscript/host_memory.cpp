#include "planner/torchscript/host_memory.h"

#include <malloc.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
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
constexpr size_t kMapFrom = static_cast<size_t>(kMappedBytes);
constexpr size_t kReuseFrom = static_cast<size_t>(kReusedBytes);
constexpr size_t kPage = 4096;
constexpr size_t kHugePage = size_t{2} << 20;

// LibTorch's own CPU allocator aligns to 64 bytes; so does this one.
constexpr size_t kAlignment = 64;
// Every block starts with a header that remembers its size, so the deleter (which LibTorch
// calls with the data pointer alone for raw allocations) can count and unmap it.
constexpr size_t kHeader = kAlignment;

// Freed mid-size blocks, by their mapped (page-rounded) size: a step asks for the same sizes
// as the one before, so after the first step they come from here, without a system call or
// a page fault, and never from glibc's heap, where they left holes that the next step's
// different mix of sizes could not fill (6 MiB of bytegpt's 45, bench/README.md).
class ReuseCache {
 public:
  void* take(size_t mapped) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(mapped);
      if (it != free_.end() && !it->second.empty()) {
        void* block = it->second.back();
        it->second.pop_back();
        bytes_.fetch_sub(static_cast<int64_t>(mapped), std::memory_order_relaxed);
        return block;
      }
    }
    void* block =
        ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return block == MAP_FAILED ? nullptr : block;
  }

  void give(void* block, size_t mapped) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (bytes_.load(std::memory_order_relaxed) + static_cast<int64_t>(mapped) <= kCachedLimit) {
        free_[mapped].push_back(block);
        bytes_.fetch_add(static_cast<int64_t>(mapped), std::memory_order_relaxed);
        return;
      }
    }
    ::munmap(block, mapped);
  }

  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  std::atomic<int64_t> bytes_{0};
};

ReuseCache reuse_cache;

size_t mapped_size(size_t total) {
  return (total + kPage - 1) / kPage * kPage;
}

void add(int64_t bytes) {
  const int64_t now = live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen) {
    if (peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
      cached_at_peak.store(reuse_cache.bytes(), std::memory_order_relaxed);
      break;
    }
  }
}

void release(void* data) {
  if (!data) return;
  char* block = static_cast<char*>(data) - kHeader;
  const size_t bytes = *reinterpret_cast<size_t*>(block);
  live.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  const size_t total = bytes + kHeader;
  if (total >= kMapFrom) {
    ::munmap(block, total);
  } else if (total >= kReuseFrom) {
    reuse_cache.give(block, mapped_size(total));
  } else {
    from_malloc.fetch_sub(static_cast<int64_t>(::malloc_usable_size(block)),
                          std::memory_order_relaxed);
    std::free(block);
  }
}

c10::DataPtr allocate_counted(size_t bytes) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (bytes == 0) return {nullptr, nullptr, &release, cpu};
  const size_t total = bytes + kHeader;
  void* block = nullptr;
  if (total >= kMapFrom) {
    block = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED) {
      block = nullptr;
    } else if (total >= kHugePage) {
      // Fresh mappings fault in page by page; with 4 KiB pages that cost GPT-2 small a
      // quarter of its step time, with transparent huge pages nothing measurable.
      ::madvise(block, total, MADV_HUGEPAGE);
    }
  } else if (total >= kReuseFrom) {
    block = reuse_cache.take(mapped_size(total));
  } else if (::posix_memalign(&block, kAlignment, total) == 0) {
    from_malloc.fetch_add(static_cast<int64_t>(::malloc_usable_size(block)),
                          std::memory_order_relaxed);
  } else {
    block = nullptr;
  }
  if (!block) throw std::bad_alloc();
  *static_cast<size_t*>(block) = bytes;
  add(static_cast<int64_t>(bytes));
  void* data = static_cast<char*>(block) + kHeader;
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
  c10::SetCPUAllocator(&counting_allocator, /*priority=*/1);
}

int64_t tensor_bytes() {
  return live.load(std::memory_order_relaxed);
}

int64_t peak_tensor_bytes() {
  return peak.load(std::memory_order_relaxed);
}

void reset_peak() {
  peak.store(live.load(std::memory_order_relaxed), std::memory_order_relaxed);
  cached_at_peak.store(reuse_cache.bytes(), std::memory_order_relaxed);
}

int64_t cached_bytes() {
  return reuse_cache.bytes();
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

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace mfsdp::host_memory
