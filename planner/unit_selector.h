#pragma once
// Choosing units by module path globs or module type, as `mfsdp plan --unit/--unit-type/--auto`
// and scope files do.

#include <optional>
#include <string>
#include <vector>

#include "planner/torchscript/model_ir.h"

namespace mfsdp::planner {

struct UnitSelector {
  enum class Kind { kPath, kType };
  UnitSelector(Kind kind, std::string pattern, std::string source = "")
      : kind(kind), pattern(std::move(pattern)), source(std::move(source)) {}

  Kind kind = Kind::kPath;
  std::string pattern;
  std::string source;       // where it was written, e.g. "scope.json: fully_shard[2]"; "" for flags
  std::string flag;         // the flag, when not --unit or --unit-type (e.g. "--checkpoint")
  bool checkpoint = false;  // a scope file's "checkpoint": true, for the units it selects
  // A scope file's "reshard_after_forward", for the units it selects; unset: the policy's.
  std::optional<bool> reshard_after_forward;
  // How the user wrote it, for messages: "--unit 'layers.*'", "scope.json: fully_shard[2] 'x'".
  std::string origin() const;
};

// Path globs work on '.'-separated segments: '*' matches within one segment, '**' matches any
// number of whole segments, and '<root>' or '' is the model itself.
bool path_matches(const std::string& pattern, const std::string& path);
// Type patterns match the qualified class name or its last component ("Block").
bool type_matches(const std::string& pattern, const std::string& type);

// Module indices to register, in selector order and, within a selector, definition order.
// Throws Error(kPlanning) when a selector matches nothing or two selectors pick one module.
std::vector<int> select_units(const ModelIR& model, const std::vector<UnitSelector>& selectors);

// Which of `units` (module indices, as select_units returns them) to checkpoint: those a
// selector with `checkpoint` picked, and those `checkpoint` (--checkpoint, --checkpoint-type)
// matches. Throws Error(kPlanning) when one of `checkpoint` matches none of the units, naming
// the units.
std::vector<bool> checkpointed_units(const ModelIR& model, const std::vector<int>& units,
                                     const std::vector<UnitSelector>& unit_selectors,
                                     const std::vector<UnitSelector>& checkpoint);

// Each of `units`' resharding after forward where it is not the policy's: what a selector
// with `reshard_after_forward` says, and false for those `keep` (--keep-after-forward)
// matches. Throws Error(kPlanning) when one of `keep` matches none of the units, naming them.
std::vector<std::optional<bool>> unit_reshard_after_forward(
    const ModelIR& model, const std::vector<int>& units,
    const std::vector<UnitSelector>& unit_selectors, const std::vector<UnitSelector>& keep);

// --auto: every element of every ModuleList, then the model itself.
std::vector<int> auto_units(const ModelIR& model);

}  // namespace mfsdp::planner
