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

// The deepest unit whose module path strictly contains `name`, or null: the units named by
// the dotted prefixes of `name`, longest first, then the model itself.
const Unit* nearest_enclosing(const Context& context, const std::string& name) {
  if (name == kRootName) return nullptr;
  for (size_t dot = name.rfind('.'); dot != std::string::npos && dot > 0;
       dot = name.rfind('.', dot - 1)) {
    if (const Unit* unit = context.unit(name.substr(0, dot))) return unit;
  }
  return context.unit(kRootName);
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

    // A unit's parent is its nearest enclosing unit, so the units form a tree by module path.
    const Unit* nearest = nearest_enclosing(context, unit.name);
    if (unit.parent) {
      const std::string& parent = *unit.parent;
      if (context.unit(parent) == nullptr) {
        context.report(path + ".parent", quote(parent) + " is not a unit");
      } else if (!encloses(parent, unit.name)) {
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
