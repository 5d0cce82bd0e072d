#include "executor/runtime/cuda_slots.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>

#include "executor/runtime/cuda_device.h"
#include "executor/runtime/cuda_error.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

int64_t round_up(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

SlotLayout plan_slot_layout(const schema::Memory& memory, int64_t align_bytes) {
  if (align_bytes <= 0 || (align_bytes & (align_bytes - 1)) != 0) {
    fail(ExitCode::kUsage, "plan policy align_bytes " + std::to_string(align_bytes) +
                               " is not a power of two; re-plan with --align a power of two");
  }
  SlotLayout layout;
  layout.alignment = std::max(kDeviceAlignment, align_bytes);
  const size_t n = memory.slots.size();
  layout.offsets.assign(n, -1);
  layout.bytes.assign(n, 0);
  for (const schema::Slot& slot : memory.slots) {
    if (slot.index < 0 || slot.index >= static_cast<int64_t>(n) ||
        layout.offsets[slot.index] != -1) {
      fail(ExitCode::kUsage, "plan memory.slots: index " + std::to_string(slot.index) +
                                 " is out of range or repeated (expected 0.." +
                                 std::to_string(n - 1) + " once each); run mfsdp validate");
    }
    if (slot.bytes < 0) {
      fail(ExitCode::kUsage, "plan memory.slots[" + std::to_string(slot.index) +
                                 "]: negative size; run mfsdp validate");
    }
    layout.offsets[slot.index] = 0;  // seen; placed below in index order
    layout.bytes[slot.index] = slot.bytes;
  }
  int64_t end = 0;
  for (size_t i = 0; i < n; ++i) {
    if (layout.bytes[i] > std::numeric_limits<int64_t>::max() - end - layout.alignment) {
      fail(ExitCode::kUsage, "plan memory.slots: sizes overflow 64 bits; run mfsdp validate");
    }
    layout.offsets[i] = round_up(end, layout.alignment);
    end = layout.offsets[i] + layout.bytes[i];
  }
  layout.total_bytes = round_up(end, layout.alignment);
  return layout;
}

CudaSlots::CudaSlots(const schema::Memory& memory, int64_t align_bytes, int device, int rank)
    : layout_(plan_slot_layout(memory, align_bytes)), device_(device) {
  if (layout_.total_bytes == 0) return;
  CurrentDevice current(device);
  check_cuda(cudaMalloc(&base_, static_cast<size_t>(layout_.total_bytes)),
             "rank " + std::to_string(rank) + ": allocating " +
                 std::to_string(layout_.total_bytes) + " bytes for the plan's " +
                 std::to_string(count()) + " slot(s) on GPU " + std::to_string(device) +
                 " (cudaMalloc)");
}

CudaSlots::~CudaSlots() {
  if (base_ == nullptr) return;
  int previous = -1;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  cudaFree(base_);
  if (previous >= 0) cudaSetDevice(previous);
}

int64_t CudaSlots::abandon() {
  if (base_ == nullptr) return 0;
  base_ = nullptr;
  return layout_.total_bytes;
}

void CudaSlots::check_index(int slot) const {
  if (slot < 0 || slot >= count()) {
    fail(ExitCode::kInternal, "slot " + std::to_string(slot) + " does not exist (the plan has " +
                                  std::to_string(count()) + ")");
  }
}

void* CudaSlots::data(int slot) const {
  check_index(slot);
  if (base_ == nullptr) return nullptr;
  return static_cast<char*>(base_) + layout_.offsets[slot];
}

int64_t CudaSlots::bytes(int slot) const {
  check_index(slot);
  return layout_.bytes[slot];
}

}  // namespace mfsdp::executor
