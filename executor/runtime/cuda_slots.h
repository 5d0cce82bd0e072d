#pragma once
// The plan's static slots in GPU memory: one cudaMalloc for all of them, made once when the
// runtime starts, with each slot at an aligned offset in it. The layout is a plain function of
// the plan's `memory.slots`, so it is tested without a GPU.

#include <cstdint>
#include <vector>

#include "schema/plan.h"

namespace mfsdp::executor {

// cudaMalloc's own alignment: a slot starts as well aligned as a separate allocation would.
inline constexpr int64_t kDeviceAlignment = 256;

struct SlotLayout {
  int64_t alignment = 0;         // max(kDeviceAlignment, the plan's align_bytes)
  std::vector<int64_t> offsets;  // by slot index: where the slot starts in the allocation
  std::vector<int64_t> bytes;    // by slot index: its planned size
  int64_t total_bytes = 0;       // the one allocation: the last slot's end, rounded up
};

// Slots in index order, each starting at a multiple of the alignment. Throws Error(kUsage)
// when the slot indices are not 0..n-1, a size is negative, or `align_bytes` is not a positive
// power of two (the plan would not pass mfsdp validate).
SlotLayout plan_slot_layout(const schema::Memory& memory, int64_t align_bytes);

class CudaSlots {
 public:
  // Allocates plan_slot_layout(memory, align_bytes).total_bytes on `device`; Error(kRuntime)
  // naming `rank`, the size and the device when CUDA cannot. No allocation when it is 0.
  CudaSlots(const schema::Memory& memory, int64_t align_bytes, int device, int rank);
  // cudaFree, which waits for the device: destroy the slots after the streams that use them.
  ~CudaSlots();
  // Forgets the allocation without freeing it (the process's exit returns it), for a device
  // that a wedged collective keeps busy; returns its size in bytes.
  int64_t abandon();
  CudaSlots(const CudaSlots&) = delete;
  CudaSlots& operator=(const CudaSlots&) = delete;

  int count() const { return static_cast<int>(layout_.offsets.size()); }
  void* data(int slot) const;  // device memory; Error(kInternal) for a slot out of range
  int64_t bytes(int slot) const;
  const SlotLayout& layout() const { return layout_; }
  int device() const { return device_; }

 private:
  void check_index(int slot) const;

  SlotLayout layout_;
  int device_;
  void* base_ = nullptr;
};

}  // namespace mfsdp::executor
