#include "search/unit_choices.h"

#include <algorithm>
#include <map>

#include "planner/unit_selector.h"

namespace mfsdp::search {

std::vector<UnitChoice> unit_choices(const planner::ModelIR& ir, const UnitChoice& yours,
                                     bool traced, bool timed, int& blocks_choice) {
  std::vector<UnitChoice> out = {yours};
  out[0].checkpoint.resize(out[0].modules.size(), false);
  out[0].reshard_after_forward.resize(out[0].modules.size());
  const auto add = [&](const std::string& name, const std::vector<std::vector<int>>& modules,
                       const std::vector<bool>& checkpoint) {
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].modules == modules && out[i].checkpoint == checkpoint &&
          std::none_of(out[i].reshard_after_forward.begin(), out[i].reshard_after_forward.end(),
                       [](const std::optional<bool>& r) { return r.has_value(); })) {
        return static_cast<int>(i);
      }
    }
    out.push_back({name, modules, checkpoint, std::vector<std::optional<bool>>(modules.size())});
    return static_cast<int>(out.size() - 1);
  };
  const std::vector<int> blocks = planner::auto_units(ir);  // the elements, then the model
  const size_t n = blocks.size() - 1;
  blocks_choice = add(n > 0 ? "blocks + model" : "model only", planner::one_module_units(blocks),
                      std::vector<bool>(blocks.size(), false));
  // A checkpointed unit may hold no other unit: lists nested in a block rule it out.
  bool flat = n > 1;
  for (size_t a = 0; a < n && flat; ++a) {
    for (size_t b = 0; b < n && flat; ++b) {
      if (a != b && ir.contains(blocks[a], blocks[b])) flat = false;
    }
  }
  if (flat && traced) {
    const size_t half = (n + 1) / 2;
    if (half < n) {
      std::vector<bool> first_half(blocks.size(), false);
      std::fill(first_half.begin(), first_half.begin() + static_cast<std::ptrdiff_t>(half), true);
      add("blocks + model, " + std::to_string(half) + " of " + std::to_string(n) +
              " blocks checkpointed",
          planner::one_module_units(blocks), first_half);
    }
    std::vector<bool> every(blocks.size(), true);
    every.back() = false;  // the model holds the blocks
    add("blocks + model, every block checkpointed", planner::one_module_units(blocks), every);
  }
  // Adjacent blocks merged: fewer, larger collectives. Twos and fours of the elements of one
  // list, where a list has more than that; a unit of one block holds the remainder. Only a
  // trace weighs what they lose in overlap: a count of collectives always prefers them.
  if (flat && timed) {
    for (size_t size : {size_t{2}, size_t{4}}) {
      std::vector<std::vector<int>> merged;
      for (size_t b = 0; b < n; ++b) {
        const bool same_list =
            !merged.empty() && ir.modules[static_cast<size_t>(merged.back().front())].parent ==
                                   ir.modules[static_cast<size_t>(blocks[b])].parent;
        if (same_list && merged.back().size() < size) {
          merged.back().push_back(blocks[b]);
        } else {
          merged.push_back({blocks[b]});
        }
      }
      if (merged.size() + 1 >= blocks.size()) break;  // no list long enough
      merged.push_back({0});
      add("blocks merged in " + std::to_string(size) + "s + model", merged,
          std::vector<bool>(merged.size(), false));
    }
  }
  // A unit per repeated block type: every module of a class with two or more instances that
  // have modules of their own (blocks, not layers such as Linear) and hold no other instance,
  // plus the model; the two such classes that hold the most parameters and are not a choice
  // already.
  std::map<std::string, std::vector<int>> by_type;
  for (size_t m = 1; m < ir.modules.size(); ++m) {
    const planner::ModuleNode& node = ir.modules[m];
    const std::string type = node.type.substr(node.type.rfind('.') + 1);
    if (node.children.empty() || type == "ModuleList" || type == "ModuleDict") continue;
    by_type[node.type].push_back(static_cast<int>(m));
  }
  std::vector<std::pair<int64_t, std::string>> repeated;  // parameters held, class
  for (const auto& [type, modules] : by_type) {
    if (modules.size() < 2) continue;
    bool apart = true;
    for (int a : modules) {
      for (int b : modules) apart = apart && (a == b || !ir.contains(a, b));
    }
    if (!apart) continue;
    int64_t numel = 0;
    for (int a : modules) {
      for (size_t m = 0; m < ir.modules.size(); ++m) {
        if (!ir.contains(a, static_cast<int>(m))) continue;
        for (int t : ir.modules[m].params) numel += ir.tensors[static_cast<size_t>(t)].numel();
      }
    }
    repeated.emplace_back(-numel, type);
  }
  std::sort(repeated.begin(), repeated.end());
  int added = 0;
  for (const auto& [negative_numel, type] : repeated) {
    if (added == 2) break;
    std::vector<int> modules = by_type.at(type);
    modules.push_back(0);
    const size_t before = out.size();
    add("every " + type.substr(type.rfind('.') + 1) + " + model",
        planner::one_module_units(modules), std::vector<bool>(modules.size(), false));
    added += out.size() > before ? 1 : 0;
  }
  add("model only", {{0}}, {false});
  return out;
}

}  // namespace mfsdp::search
