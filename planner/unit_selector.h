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

// The units to register, each as its module indices: in selector order and, within a
// selector, definition order. A path pattern of parts joined by '+' ("layers.0+layers.1") is
// one merged unit of every module its parts match, in definition order. Throws
// Error(kPlanning) when a selector (or a part) matches nothing or two selectors pick one
// module.
std::vector<std::vector<int>> select_units(const ModelIR& model,
                                           const std::vector<UnitSelector>& selectors);

// Which of `units` (as select_units returns them) to checkpoint: those a
// selector with `checkpoint` picked, and those `checkpoint` (--checkpoint, --checkpoint-type)
// matches. Throws Error(kPlanning) when one of `checkpoint` matches none of the units, naming
// the units.
// A selector picks a unit when it (or, joined by '+', one of its parts) matches one of the
// unit's modules.
std::vector<bool> checkpointed_units(const ModelIR& model,
                                     const std::vector<std::vector<int>>& units,
                                     const std::vector<UnitSelector>& unit_selectors,
                                     const std::vector<UnitSelector>& checkpoint);

// Each of `units`' resharding after forward where it is not the policy's: what a selector
// with `reshard_after_forward` says, and false for those `keep` (--keep-after-forward)
// matches. Throws Error(kPlanning) when one of `keep` matches none of the units, naming them.
std::vector<std::optional<bool>> unit_reshard_after_forward(
    const ModelIR& model, const std::vector<std::vector<int>>& units,
    const std::vector<UnitSelector>& unit_selectors, const std::vector<UnitSelector>& keep);

// --auto: every element of every ModuleList, then the model itself.
std::vector<int> auto_units(const ModelIR& model);
// A unit per module of `modules`.
std::vector<std::vector<int>> one_module_units(const std::vector<int>& modules);
// The module paths of a unit given as module indices ("" for the model), for fully_shard.
std::vector<std::string> module_paths(const ModelIR& model, const std::vector<int>& unit);
// The name a plan gives that unit: its module paths joined by '+', <root> for the model.
std::string unit_name(const ModelIR& model, const std::vector<int>& unit);

}  // namespace mfsdp::planner
