#pragma once
// The sets of units `mfsdp plan --optimize` and `--sweep` try (docs/predict.md#choosing-a-plan):
// the user's, every block plus the model with no, half or every block checkpointed, adjacent
// blocks merged in twos and fours plus the model, every module of a repeated block class plus
// the model, and the model alone.

#include <optional>
#include <string>
#include <vector>

#include "planner/torchscript/model_ir.h"

namespace mfsdp::search {

// One way to choose the units: each unit's module indices (two or more: merged), their
// checkpoint flags and their own resharding after forward (unset: the policy's; empty: unset
// for every unit).
struct UnitChoice {
  std::string name;  // "yours", "blocks + model", "model only", ...
  std::vector<std::vector<int>> modules;
  std::vector<bool> checkpoint;
  std::vector<std::optional<bool>> reshard_after_forward;
};

// The units tried, `yours` first: every ModuleList element plus the model (FSDP2's habit);
// with a trace (`traced`), which measures what checkpointing saves, the same with the first
// half of the blocks or every block checkpointed; with a timed trace (`timed`), which also
// measures what fewer collectives lose in overlap, adjacent elements merged in twos and in
// fours plus the model; every module of a repeated block class plus the model (the two
// classes holding the most parameters); the model alone. A choice equal to an earlier one is
// left out. `blocks_choice` is set to the index of "every block plus the model".
std::vector<UnitChoice> unit_choices(const planner::ModelIR& ir, const UnitChoice& yours,
                                     bool traced, bool timed, int& blocks_choice);

}  // namespace mfsdp::search
