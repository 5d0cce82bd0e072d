#include "executor/runtime/host_memory.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include <c10/core/CPUAllocator.h>

namespace mfsdp::executor::host_memory {
namespace {

std::atomic<int64_t> live{0};
std::atomic<int64_t> peak{0};
std::atomic<bool> is_installed{false};
constexpr size_t kMapFrom = static_cast<size_t>(kMappedBytes);
constexpr size_t kHugePage = size_t{2} << 20;

// LibTorch's own CPU allocator aligns to 64 bytes; so does this one.
constexpr size_t kAlignment = 64;
// Every block starts with a header that remembers its size, so the deleter (which LibTorch
// calls with the data pointer alone for raw allocations) can count and unmap it.
constexpr size_t kHeader = kAlignment;

void add(int64_t bytes) {
  const int64_t now = live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

void release(void* data) {
  if (!data) return;
  char* block = static_cast<char*>(data) - kHeader;
  const size_t bytes = *reinterpret_cast<size_t*>(block);
  live.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  if (bytes + kHeader >= kMapFrom) {
    ::munmap(block, bytes + kHeader);
  } else {
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
  } else if (::posix_memalign(&block, kAlignment, total) != 0) {
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

}  // namespace mfsdp::executor::host_memory
