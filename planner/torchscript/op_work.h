#pragma once
// The work a traced step's operators do, counted from their shapes (docs/plan-format.md#work):
// FLOPs and bytes read and written per op class, as each operator runs. It sees every
// operator the dispatcher runs (forward, autograd's backward, recompute), so it counts the
// same on meta tensors, whose kernels compute nothing, as on the CPU. No LibTorch types here.

#include <cstdint>

#include "schema/plan.h"

namespace mfsdp::planner {

// What an analytic compute model times differently: dense products are bound by FLOP/s,
// attention kernels by their own efficiency, elementwise and normalisation by memory
// bandwidth, embedding lookups by gathers.
enum class OpClass { kMatmul, kAttention, kElementwise, kEmbedding };

using OpWork = schema::ClassWork;
using PhaseWork = schema::Work;

inline OpWork& work_of(PhaseWork& phase, OpClass c) {
  switch (c) {
    case OpClass::kMatmul:
      return phase.matmul;
    case OpClass::kAttention:
      return phase.attention;
    case OpClass::kEmbedding:
      return phase.embedding;
    case OpClass::kElementwise:
      break;
  }
  return phase.elementwise;
}

inline void add_work(PhaseWork& phase, OpClass c, OpWork work) {
  work_of(phase, c) += work;
}

inline void add_work(PhaseWork& phase, PhaseWork more) {
  phase += more;
}

// Receives each counted operator's work, on the thread that ran it (autograd may run backward
// on its own threads).
class WorkSink {
 public:
  virtual ~WorkSink() = default;
  virtual void add_work(OpClass c, OpWork work) = 0;
};

// Counts every operator's work into `sink` while it lives (one at a time per process).
// An operator of a class counts once, with its FLOPs from its shapes (matmul and convolution:
// 2 per multiply-add; attention: its two products) and the bytes of its tensor inputs and
// outputs; the operators it calls inside do not count again. Any other operator counts where
// it calls no operator itself, unless it only makes a view or an empty tensor: its bytes, and
// one FLOP per output element.
class CountingOps {
 public:
  explicit CountingOps(WorkSink& sink);
  ~CountingOps();
  CountingOps(const CountingOps&) = delete;
  CountingOps& operator=(const CountingOps&) = delete;

 private:
  uint64_t handle_ = 0;
};

}  // namespace mfsdp::planner
