#include "predict/memory_fit.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "schema/error.h"
#include "schema/optimizer.h"

namespace mfsdp::predict {

namespace {

int64_t scaled(int64_t bytes, int64_t samples, int64_t traced) {
  return static_cast<int64_t>(
      std::llround(static_cast<double>(bytes) * static_cast<double>(samples) /
                   static_cast<double>(std::max<int64_t>(1, traced))));
}

}  // namespace

RankMemory rank_memory(const schema::Plan& plan, const std::string& optimizer,
                       int64_t microbatch_samples) {
  const schema::OptimizerKind* kind = schema::find_optimizer(optimizer);
  if (!kind) {
    fail(ExitCode::kUsage, "optimizer '" + optimizer + "' is not " + schema::optimizer_choices());
  }
  const schema::Memory& m = plan.memory;
  RankMemory r;
  r.parameters = m.sharded_param_bytes;
  r.gradients = m.sharded_grad_bytes;
  r.optimizer_state = m.sharded_grad_bytes * kind->state_buffers;
  r.slots = m.slot_bytes;
  if (m.activations) {
    r.activations =
        scaled(m.activations->peak_bytes, microbatch_samples, m.activations->microbatch);
  }
  return r;
}

MemoryFit fit_memory(const schema::Plan& plan, const RankMemory& memory, int64_t budget,
                     int64_t microbatch_samples) {
  MemoryFit fit;
  fit.budget = budget;
  fit.over = memory.total() - budget;
  const std::vector<std::pair<const char*, int64_t>> terms = {
      {"parameters", memory.parameters},
      {"gradients", memory.gradients},
      {"optimizer state", memory.optimizer_state},
      {"gathered slots", memory.slots},
      {"activations", memory.activations.value_or(0)}};
  fit.largest = std::max_element(terms.begin(), terms.end(), [](const auto& a, const auto& b) {
                  return a.second < b.second;
                })->first;
  if (fit.over <= 0) return fit;

  const int64_t rest = memory.unshardable();
  const int64_t shard = std::max<int64_t>(1, plan.mesh.shard_size);
  const auto fits_at = [&](int64_t ranks) {
    const double sharded = static_cast<double>(memory.sharded()) * static_cast<double>(shard) /
                           static_cast<double>(ranks);
    return static_cast<double>(rest) + sharded <= static_cast<double>(budget);
  };
  for (int64_t ranks = shard * 2; ranks <= schema::kMaxWorldSize; ranks *= 2) {
    if (fits_at(ranks)) {
      fit.shard_size = ranks;
      break;
    }
  }
  fit.fits_unreplicated = plan.mesh.replicate_size > 1 && fits_at(plan.mesh.world_size);

  if (memory.activations && plan.memory.activations) {
    const schema::Activations& a = *plan.memory.activations;
    int64_t saved = 0;
    for (const schema::UnitActivations& u : a.units) {
      const auto unit = std::find_if(plan.units.begin(), plan.units.end(),
                                     [&](const schema::Unit& x) { return x.name == u.unit; });
      if (unit == plan.units.end() || unit->checkpoint) continue;
      ++fit.uncheckpointed_units;
      saved += std::max<int64_t>(0, u.saved_bytes);
    }
    fit.checkpoint_frees_at_most =
        std::min(*memory.activations, scaled(saved, microbatch_samples, a.microbatch));
    fit.checkpointing_may_fit =
        fit.uncheckpointed_units > 0 && fit.checkpoint_frees_at_most >= fit.over;
    // Activations scale with the samples: the most that fit beside the rest.
    const int64_t room = budget - memory.sharded() - memory.slots;
    if (room > 0 && microbatch_samples > 1 && *memory.activations > 0) {
      const double per_sample =
          static_cast<double>(*memory.activations) / static_cast<double>(microbatch_samples);
      const auto samples = static_cast<int64_t>(std::floor(static_cast<double>(room) / per_sample));
      if (samples >= 1 && samples < microbatch_samples) fit.microbatch_samples = samples;
    }
  }
  return fit;
}

}  // namespace mfsdp::predict
