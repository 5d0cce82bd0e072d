#pragma once
// Host memory as one rank sees it: the process's resident set from /proc, and the bytes that
// LibTorch's CPU tensors hold, counted by an allocator that sits in front of LibTorch's.
//
// Counting tensor bytes is what lets `mfsdp run` say where a peak came from: RSS alone cannot
// tell activations from a leftover copy of the model or from memory that malloc keeps.

#include <cstdint>

namespace mfsdp::host_memory {

// Installs the counting CPU allocator (idempotent; call before the tensors you want counted
// are made: tensors allocated earlier keep their own deleter and are never counted, and raw
// blocks of the allocator it replaces, freed after, go back to that allocator).
//
// Tensors of kPooledBytes or more come from a PagePool (page_pool.h): page-aligned blocks
// whose pages are kept when freed and handed to the next requests whatever their sizes, up to
// the high-water mark of live pooled bytes, so a step neither faults its pages in again nor
// holds more at its peak than its tensors. glibc kept such blocks in its arenas, where freed
// gradients and activations stayed resident as fragments between steps (~500 MiB per rank at
// GPT-2 small, bench/README.md); mapping each one fresh (until 0ac1070) zero-filled them
// again on every step. Smaller tensors come from malloc.
void install();
// Counts meta tensors as well, from the next one made (idempotent): a meta tensor holds no
// memory, but the bytes it stands for count in tensor_bytes() and its peak as a CPU tensor's
// would, so that a shape-only trace (`mfsdp plan --trace-device meta`) measures the
// activations a CPU trace does.
void install_meta();
constexpr int64_t kPooledBytes = int64_t{128} << 10;

// A training step ended: the pool unmaps pages it has not handed out again for
// PagePool::kStaleSteps steps.
void end_step();
// Unmaps every page the pool keeps and restarts its high-water mark from the tensors alive
// now (after set-up, whose peak training should not inherit, and at the end of training).
void release_cache();

struct PoolCounts {
  int64_t free_bytes = 0;     // resident pages the pool keeps for later tensors
  int64_t ceiling_bytes = 0;  // the high-water mark live + free stays within
  int64_t fresh_bytes = 0;    // bytes ever mapped fresh, each page faulted in on first use
  int64_t reused_bytes = 0;   // bytes ever handed out again from kept pages
};
PoolCounts pool_counts();

// Bytes of CPU tensors alive now, and the most alive at once since the last reset_peak().
int64_t tensor_bytes();
int64_t peak_tensor_bytes();
void reset_peak();  // the peak restarts from what is alive now

// Bytes of the pages the pool keeps for reuse now, and when tensor_bytes() last reached
// peak_tensor_bytes(): resident memory that belongs to no tensor.
int64_t cached_bytes();
int64_t cached_at_peak_bytes();

// Bytes malloc has handed out for everything but tensors (glibc's mallinfo2 less the blocks
// of the tensors counted here): the TorchScript module's code and graphs, the interpreter's,
// autograd's and the communicators' objects, strings. 0 where the C library cannot say.
int64_t heap_object_bytes();

// The process's resident set now (VmRSS) and its high-water mark (VmHWM), in bytes; 0 when
// /proc cannot say.
int64_t rss_bytes();
int64_t peak_rss_bytes();
// The part of the resident set backed by files (RssFile): the code and read-only data of the
// program and its libraries that have been paged in.
int64_t file_rss_bytes();
// Minor page faults of the process so far (getrusage): each is a page touched for the first
// time since it was mapped, which the kernel zero-fills.
int64_t minor_faults();
// Restarts the high-water mark from the current RSS (/proc/self/clear_refs); false when the
// kernel does not allow it.
bool reset_peak_rss();

}  // namespace mfsdp::host_memory
