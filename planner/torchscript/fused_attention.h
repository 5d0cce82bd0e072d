#pragma once
// A meta trace's attention as a GPU runs it (`mfsdp plan --fused-attention`,
// docs/predict.md#fused-attention): LibTorch's scaled-dot-product attention runs, on meta
// tensors as on the CPU, its math form (two products and a softmax, the L x S scores and
// probabilities saved for backward), while a GPU runs one fused kernel (FlashAttention, cuDNN)
// that keeps only its inputs, its output and the softmax's log-sum-exp per row, skips the
// tiles a causal mask hides, and recomputes the scores in backward. No LibTorch types here.

#include <cstdint>

namespace mfsdp::planner {

// While one lives (one at a time per process), aten's scaled-dot-product attention on meta
// tensors runs as the fused kernel does: forward saves query, key, value, the output, the
// mask if given, and a float32 log-sum-exp [..., L]; backward is one operator,
// mfsdp::fused_attention_backward (op_work.h counts it as attention, 5 products, halved
// under a causal mask as the forward's 2 are). Everything else, and every CPU tensor, runs
// as before.
class FusedAttention {
 public:
  FusedAttention();
  ~FusedAttention();
  FusedAttention(const FusedAttention&) = delete;
  FusedAttention& operator=(const FusedAttention&) = delete;

  // The attention calls it ran since it began (0: the model has none to fuse).
  int64_t calls() const;
};

// Whether a FusedAttention lives: an attention operator's FLOPs then skip a causal mask's
// hidden half.
bool fused_attention_active();

}  // namespace mfsdp::planner
