#pragma once
// Host memory as one rank sees it: the process's resident set from /proc, and the bytes that
// LibTorch's CPU tensors hold, counted by an allocator that sits in front of LibTorch's.
//
// Counting tensor bytes is what lets `mfsdp run` say where a peak came from: RSS alone cannot
// tell activations from a leftover copy of the model or from memory that malloc keeps.

#include <cstdint>

namespace mfsdp::host_memory {

// Installs the counting CPU allocator (idempotent; call before the tensors you want counted
// are made: tensors allocated earlier keep their own deleter and are never counted).
//
// Large tensors (at least kMappedBytes) are mapped straight from the kernel (with transparent
// huge pages where the kernel allows them) and unmapped when freed. glibc would map them too,
// until the first free of one raised its dynamic mmap threshold (up to 32 MiB) and later ones
// of that size came from its arenas, where freed gradients and activations stayed resident as
// fragments between steps (~500 MiB per rank at GPT-2 small, bench/README.md).
//
// Mid-size tensors (at least kReusedBytes, less than kMappedBytes) are mapped too, and kept
// when freed for the next tensor of the same page-rounded size, up to kCachedLimit bytes
// (beyond that a freed block is unmapped): a training step asks for the sizes the step
// before it freed, so they are reused without a system call or a page fault, and they do
// not fragment glibc's heap between the small objects around them. Smaller tensors come
// from malloc.
void install();
constexpr int64_t kMappedBytes = int64_t{1} << 20;
constexpr int64_t kReusedBytes = int64_t{128} << 10;
constexpr int64_t kCachedLimit = int64_t{256} << 20;

// Bytes of CPU tensors alive now, and the most alive at once since the last reset_peak().
int64_t tensor_bytes();
int64_t peak_tensor_bytes();
void reset_peak();  // the peak restarts from what is alive now

// Bytes of freed mid-size blocks kept for reuse now, and when tensor_bytes() last reached
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
// Restarts the high-water mark from the current RSS (/proc/self/clear_refs); false when the
// kernel does not allow it.
bool reset_peak_rss();

}  // namespace mfsdp::host_memory
