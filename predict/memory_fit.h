#pragma once
// What a rank of a plan holds, term by term, and against a memory budget which term does not
// fit and what would make it fit (`mfsdp show --predict --memory-budget`, docs/predict.md#memory).
// No LibTorch here.

#include <cstdint>
#include <optional>
#include <string>

#include "schema/plan.h"

namespace mfsdp::predict {

// A rank's memory at its peak (rank_memory_bytes is total()).
struct RankMemory {
  int64_t parameters = 0;       // sharded, in their stored dtype
  int64_t gradients = 0;        // the sharded main gradients
  int64_t optimizer_state = 0;  // the optimizer's buffers over the main gradients
  int64_t slots = 0;            // the gathered parameters' slots
  // The activation peak the trace measured, scaled to the microbatch; none without a trace's
  // activations.
  std::optional<int64_t> activations;
  int64_t sharded() const { return parameters + gradients + optimizer_state; }
  int64_t unshardable() const { return slots + activations.value_or(0); }  // more ranks keep it
  int64_t total() const { return sharded() + unshardable(); }
};

// `optimizer` is a schema optimizer name (Error(kUsage) otherwise); activations are scaled
// linearly from the traced batch to `microbatch_samples`.
RankMemory rank_memory(const schema::Plan& plan, const std::string& optimizer,
                       int64_t microbatch_samples);

// The rank's memory against `budget` bytes, and, when it is over, the ways back under it.
struct MemoryFit {
  int64_t budget = 0;
  int64_t over = 0;     // total - budget: > 0 does not fit
  std::string largest;  // the largest term: "parameters", "gradients", "optimizer state",
                        // "gathered slots" or "activations"
  // More ranks shrink only the sharded terms: the fewest shard ranks (the plan's times a power
  // of two, at most schema::kMaxWorldSize) at which the rank fits, everything else unchanged;
  // none when the slots and activations alone exceed the budget.
  std::optional<int64_t> shard_size;
  // HSDP: whether sharding over every rank (replicate 1) fits.
  bool fits_unreplicated = false;
  // Checkpointing the units that are not: how many, and the most it frees (their saved
  // activations at this microbatch; they keep their inputs, which a trace would count), and
  // whether freeing all of it would fit.
  int64_t uncheckpointed_units = 0;
  int64_t checkpoint_frees_at_most = 0;
  bool checkpointing_may_fit = false;
  // The most samples per microbatch at which the rank fits (fewer than now; none when not even
  // one does): activations scale with the samples, the rest does not.
  std::optional<int64_t> microbatch_samples;
};

MemoryFit fit_memory(const schema::Plan& plan, const RankMemory& memory, int64_t budget,
                     int64_t microbatch_samples);

}  // namespace mfsdp::predict
