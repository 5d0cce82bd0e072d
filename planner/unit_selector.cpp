#include "planner/unit_selector.h"

#include <algorithm>
#include <set>

#include "schema/error.h"
#include "schema/plan.h"

namespace mfsdp::planner {
namespace {

std::vector<std::string> split(const std::string& path, char separator = '.') {
  std::vector<std::string> out;
  if (path.empty()) return out;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find(separator, start);
    out.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) return out;
    start = dot + 1;
  }
}

bool segment_matches(const char* p, const char* s) {
  for (; *p; ++p, ++s) {
    if (*p == '*') {
      for (const char* rest = s;; ++rest) {
        if (segment_matches(p + 1, rest)) return true;
        if (!*rest) return false;
      }
    }
    if (*p != *s) return false;
  }
  return !*s;
}

bool segments_match(const std::vector<std::string>& p, size_t i, const std::vector<std::string>& s,
                    size_t j) {
  if (i == p.size()) return j == s.size();
  if (p[i] == "**") {
    for (size_t k = j; k <= s.size(); ++k) {
      if (segments_match(p, i + 1, s, k)) return true;
    }
    return false;
  }
  return j < s.size() && segment_matches(p[i].c_str(), s[j].c_str()) &&
         segments_match(p, i + 1, s, j + 1);
}

std::string short_type(const std::string& type) {
  const size_t dot = type.rfind('.');
  return dot == std::string::npos ? type : type.substr(dot + 1);
}

std::string listing(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < 12; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > 12) out += ", ... (" + std::to_string(items.size() - 12) + " more)";
  return out;
}

[[noreturn]] void fail_no_match(const ModelIR& model, const UnitSelector& selector) {
  std::vector<std::string> hints;
  if (selector.kind == UnitSelector::Kind::kPath) {
    for (int c : model.modules[0].children) hints.push_back(model.modules[c].path);
    fail(ExitCode::kPlanning, selector.origin() +
                                  " matches no module; the model's top-level "
                                  "modules are: " +
                                  listing(hints) + " ('*' matches one path segment, '**' any)");
  }
  std::set<std::string> types;
  for (const auto& m : model.modules) types.insert(short_type(m.type));
  fail(ExitCode::kPlanning, selector.origin() + " matches no module; types in the model: " +
                                listing({types.begin(), types.end()}));
}

}  // namespace

std::string UnitSelector::origin() const {
  if (!source.empty()) return source + " '" + pattern + "'";
  if (!flag.empty()) return flag + " '" + pattern + "'";
  return (kind == Kind::kPath ? "--unit '" : "--unit-type '") + pattern + "'";
}

bool path_matches(const std::string& pattern, const std::string& path) {
  if (pattern.empty() || pattern == schema::kRootName) return path.empty();
  return segments_match(split(pattern), 0, split(path), 0);
}

bool type_matches(const std::string& pattern, const std::string& type) {
  return pattern == type || pattern == short_type(type);
}

std::vector<std::vector<int>> select_units(const ModelIR& model,
                                           const std::vector<UnitSelector>& selectors) {
  std::vector<std::vector<int>> picked;
  std::vector<int> picked_by(model.modules.size(), -1);
  for (size_t s = 0; s < selectors.size(); ++s) {
    const UnitSelector& selector = selectors[s];
    // A path pattern with '+' is one merged unit of every module its parts match.
    const bool merged = selector.kind == UnitSelector::Kind::kPath &&
                        selector.pattern.find(schema::kModuleJoiner) != std::string::npos;
    std::vector<std::string> parts = {selector.pattern};
    if (merged) parts = split(selector.pattern, schema::kModuleJoiner);
    std::vector<int> unit;
    for (const std::string& part : parts) {
      bool any = false;
      for (size_t m = 0; m < model.modules.size(); ++m) {
        const bool hit = selector.kind == UnitSelector::Kind::kPath
                             ? path_matches(part, model.modules[m].path)
                             : type_matches(part, model.modules[m].type);
        if (!hit) continue;
        any = true;
        if (picked_by[m] != -1) {
          fail(ExitCode::kPlanning, selectors[picked_by[m]].origin() + " and " + selector.origin() +
                                        " both select module " +
                                        display_name(model.modules[m].path) +
                                        "; a module is sharded once, so narrow one of them");
        }
        picked_by[m] = static_cast<int>(s);
        if (merged) {
          unit.push_back(static_cast<int>(m));
        } else {
          picked.push_back({static_cast<int>(m)});
        }
      }
      if (!any && merged) {
        fail(ExitCode::kPlanning, selector.origin() + ": its part '" + part +
                                      "' matches no module; each part of a merged unit names "
                                      "modules, such as 'layers.0+layers.1'");
      }
      if (!any) fail_no_match(model, selector);
    }
    if (merged) {
      std::sort(unit.begin(), unit.end());
      picked.push_back(unit);
    }
  }
  return picked;
}

namespace {

bool selects(const ModelIR& model, const UnitSelector& selector, int m) {
  return selector.kind == UnitSelector::Kind::kPath
             ? path_matches(selector.pattern, model.modules[m].path)
             : type_matches(selector.pattern, model.modules[m].type);
}

// Whether `selector` picks one of the unit's modules (a merged pattern: by one of its parts).
bool selects(const ModelIR& model, const UnitSelector& selector, const std::vector<int>& unit) {
  std::vector<std::string> parts = {selector.pattern};
  if (selector.kind == UnitSelector::Kind::kPath) {
    parts = split(selector.pattern, schema::kModuleJoiner);
  }
  for (const std::string& part : parts) {
    UnitSelector one = selector;
    one.pattern = part;
    for (int m : unit) {
      if (selects(model, one, m)) return true;
    }
  }
  return false;
}

// Marks in `out` the units each of `extra` matches; one that matches none is refused: only
// units can be `what`.
template <typename T>
void mark_units(const ModelIR& model, const std::vector<std::vector<int>>& units,
                const std::vector<UnitSelector>& extra, const T& value, const char* what,
                std::vector<T>& out) {
  for (const UnitSelector& s : extra) {
    bool any = false;
    for (size_t u = 0; u < units.size(); ++u) {
      if (!selects(model, s, units[u])) continue;
      out[u] = value;
      any = true;
    }
    if (any) continue;
    std::vector<std::string> names;
    for (const std::vector<int>& unit : units) names.push_back(unit_name(model, unit));
    fail(ExitCode::kPlanning, s.origin() + " matches no unit; only units can be " + what +
                                  ", and the units are: " + listing(names) +
                                  " (make the module a unit with --unit too)");
  }
}

}  // namespace

std::vector<bool> checkpointed_units(const ModelIR& model,
                                     const std::vector<std::vector<int>>& units,
                                     const std::vector<UnitSelector>& unit_selectors,
                                     const std::vector<UnitSelector>& checkpoint) {
  std::vector<bool> out(units.size(), false);
  for (size_t u = 0; u < units.size(); ++u) {
    for (const UnitSelector& s : unit_selectors) {
      if (s.checkpoint && selects(model, s, units[u])) out[u] = true;
    }
  }
  mark_units(model, units, checkpoint, true, "checkpointed", out);
  return out;
}

std::vector<std::optional<bool>> unit_reshard_after_forward(
    const ModelIR& model, const std::vector<std::vector<int>>& units,
    const std::vector<UnitSelector>& unit_selectors, const std::vector<UnitSelector>& keep) {
  std::vector<std::optional<bool>> out(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    for (const UnitSelector& s : unit_selectors) {
      if (s.reshard_after_forward && selects(model, s, units[u])) out[u] = s.reshard_after_forward;
    }
  }
  mark_units(model, units, keep, std::optional<bool>(false), "kept after forward", out);
  return out;
}

std::vector<int> auto_units(const ModelIR& model) {
  std::vector<int> units;
  for (const auto& m : model.modules) {
    if (short_type(m.type) != "ModuleList") continue;
    units.insert(units.end(), m.children.begin(), m.children.end());
  }
  units.push_back(0);
  return units;
}

std::vector<std::vector<int>> one_module_units(const std::vector<int>& modules) {
  std::vector<std::vector<int>> units;
  for (int m : modules) units.push_back({m});
  return units;
}

std::vector<std::string> module_paths(const ModelIR& model, const std::vector<int>& unit) {
  std::vector<std::string> paths;
  for (int m : unit) paths.push_back(model.modules[m].path);
  return paths;
}

std::string unit_name(const ModelIR& model, const std::vector<int>& unit) {
  return schema::unit_name_of(module_paths(model, unit));
}

}  // namespace mfsdp::planner
