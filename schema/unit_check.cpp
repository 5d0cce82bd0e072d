// Unit identity and nesting: names, parents, roots, call counts, and checkpointed units
// holding no other unit.

#include <algorithm>
#include "schema/check_context.h"

namespace mfsdp::schema::check {
namespace {

// Whether module path `outer` strictly contains `inner`; the model itself contains every
// other module.
bool encloses(const std::string& outer, const std::string& inner) {
  if (outer == inner || inner == kRootName) return false;
  if (outer == kRootName) return true;
  return inner.size() > outer.size() && inner[outer.size()] == '.' &&
         inner.compare(0, outer.size(), outer) == 0;
}

// The deepest unit with a module that strictly contains module `path`, or null: the units at
// the dotted prefixes of `path`, longest first, then the model itself.
const Unit* nearest_enclosing(const Context& context, const std::string& path) {
  if (path == kRootName) return nullptr;
  for (size_t dot = path.rfind('.'); dot != std::string::npos && dot > 0;
       dot = path.rfind('.', dot - 1)) {
    if (const Unit* unit = context.unit_at(path.substr(0, dot))) return unit;
  }
  return context.unit_at(kRootName);
}

// Whether one of `outer`'s modules strictly contains every module of `inner`.
bool encloses(const Unit& outer, const Unit& inner) {
  for (const std::string& module : unit_modules(inner)) {
    const std::vector<std::string> outers = unit_modules(outer);
    if (std::none_of(outers.begin(), outers.end(),
                     [&](const std::string& o) { return encloses(o, module); })) {
      return false;
    }
  }
  return true;
}

// A merged unit's modules: two or more distinct modules apart from each other, named by it.
void check_merged(Context& context, const std::string& path, const Unit& unit) {
  if (unit.modules.empty()) return;
  if (unit.modules.size() < 2) {
    return context.report(path + ".modules", "lists one module; a unit of one module has none");
  }
  for (size_t i = 0; i < unit.modules.size(); ++i) {
    const std::string& module = unit.modules[i];
    if (module.empty() || module == kRootName) {
      return context.report(at(path + ".modules", i),
                            "is " + quote(module) + "; the model cannot be merged with a module");
    }
    for (size_t j = 0; j < i; ++j) {
      if (module == unit.modules[j] || encloses(module, unit.modules[j]) ||
          encloses(unit.modules[j], module)) {
        return context.report(at(path + ".modules", i), quote(module) + " is or contains " +
                                                            quote(unit.modules[j]) +
                                                            "; a merged unit's modules lie apart");
      }
    }
  }
  if (unit.checkpoint) {
    context.report(path + ".checkpoint",
                   "is true for a merged unit; checkpoint units of one module");
  }
  if (unit.name != unit_name_of(unit.modules)) {
    context.report(path + ".name", "is " + quote(unit.name) + ", but its modules name it " +
                                       quote(unit_name_of(unit.modules)));
  }
}

}  // namespace

void check_units(Context& context) {
  const std::vector<Unit>& units = context.plan.units;
  std::map<std::string, size_t> first_index;
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string path = at("units", i);
    const Unit& unit = units[i];
    if (unit.name.empty()) {
      context.report(path + ".name", "is empty");
    } else if (const auto [it, fresh] = first_index.emplace(unit.name, i); !fresh) {
      context.report(path + ".name", "duplicate unit name " + quote(unit.name) + " (also " +
                                         at("units", it->second) + ")");
    }

    check_merged(context, path, unit);

    // A unit's parent is its nearest enclosing unit, so the units form a tree by module path;
    // a merged unit's modules share it, and hold no other unit.
    const std::vector<std::string> modules = unit_modules(unit);
    const Unit* nearest = nearest_enclosing(context, modules.front());
    for (const std::string& module : modules) {
      if (nearest_enclosing(context, module) != nearest) {
        context.report(path + ".modules",
                       "its modules lie in different units; merge modules "
                       "that sit in the same unit");
        break;
      }
    }
    if (nearest != nullptr && !nearest->modules.empty()) {
      context.report(path + ".name", quote(unit.name) + " lies inside merged unit " +
                                         quote(nearest->name) +
                                         "; a merged unit holds no other unit");
    }
    if (unit.parent) {
      const std::string& parent = *unit.parent;
      if (context.unit(parent) == nullptr) {
        context.report(path + ".parent", quote(parent) + " is not a unit");
      } else if (!encloses(*context.unit(parent), unit)) {
        context.report(path + ".parent",
                       quote(parent) + " does not enclose " + quote(unit.name) + " by module path");
      } else if (nearest != nullptr && nearest->name != parent) {
        context.report(path + ".parent", quote(parent) + " is not the nearest enclosing unit; " +
                                             quote(nearest->name) + " is");
      }
    } else if (nearest != nullptr) {
      context.report(path + ".parent",
                     "is null, but unit " + quote(nearest->name) + " encloses " + quote(unit.name));
    }
    if (unit.root == unit.parent.has_value()) {
      context.report(path + ".root", unit.root ? "is true, but the unit has a parent"
                                               : "is false, but the unit has no parent");
    }
    if (unit.call_count < 0) {
      context.report(path + ".call_count", "must be >= 0, got " + std::to_string(unit.call_count));
    }
    // A recompute re-runs the unit's forward without hooks: a unit inside would go ungathered.
    if (unit.parent) {
      const Unit* parent = context.unit(*unit.parent);
      if (parent != nullptr && parent->checkpoint) {
        context.report(path + ".parent",
                       quote(*unit.parent) + " is checkpointed, so it cannot contain unit " +
                           quote(unit.name) + "; checkpoint units that hold no other unit");
      }
    }
  }

  // Roots are listed in registration order, which only the scope knew; the set must match.
  std::vector<std::string> roots, listed = context.plan.roots;
  for (const Unit& unit : units) {
    if (unit.root) roots.push_back(unit.name);
  }
  std::sort(roots.begin(), roots.end());
  std::sort(listed.begin(), listed.end());
  if (listed != roots) {
    context.report("roots", "is " + quote_list(context.plan.roots) +
                                ", expected the units with "
                                "root true, in registration order: " +
                                quote_list(roots));
  }
}

}  // namespace mfsdp::schema::check
