#pragma once
// What the check_plan passes share. Internal to the schema library: each pass lives in the
// file named after the part of the plan it checks and reports into one Context.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "schema/plan.h"
#include "schema/problem.h"

namespace mfsdp::schema::check {

// Wide enough that sums of plan integers times dtype sizes cannot overflow, so a junk plan
// gets a problem instead of undefined behaviour.
using Wide = __int128;
std::string to_string(Wide value);

// A unit or parameter name in a message: quoted, control characters escaped.
std::string quote(const std::string& name);
// A list of names in a message: ['a', 'b'].
std::string quote_list(const std::vector<std::string>& names);
std::string at(const std::string& path, size_t index);

class Context {
 public:
  explicit Context(const Plan& plan);

  const Plan& plan;

  void report(const std::string& path, const std::string& message) {
    problems_.push_back({path, message});
  }
  std::vector<Problem> take_problems() { return std::move(problems_); }

  // The first unit of that name, or null.
  const Unit* unit(const std::string& name) const;
  // The first unit made of the module at `path` (alone or merged with others), or null.
  const Unit* unit_at(const std::string& path) const;

  // Dtype sizes, or none where a dtype is unknown (already reported) so that dependent sums
  // are skipped instead of reported again.
  std::optional<int64_t> storage_size(const Group& group) const;
  std::optional<int64_t> compute_size(const Group& group) const;
  std::optional<int64_t> reduce_size() const;
  // Bytes per element of the main gradients (main_grad_dtype), when the reduce dtype is known.
  std::optional<int64_t> main_grad_size() const;
  // Whether every group's dtype is known, so which groups have a gradient is known.
  bool group_dtypes_known() const { return group_dtypes_known_; }
  // Elements the group's offsets and shards align to; none if align_bytes or a dtype is bad.
  std::optional<int64_t> align_elems(const Group& group) const;

 private:
  std::map<std::string, const Unit*> units_;
  std::map<std::string, const Unit*> unit_at_;  // module path -> unit
  bool group_dtypes_known_ = true;
  std::vector<Problem> problems_;
};

// The entries, [first, last] inclusive, during which a unit's unsharded buffer exists: from
// the entry issuing its all-gather to the one resharding it.
struct Lifetime {
  size_t first = 0;
  size_t last = 0;
};
using Lifetimes = std::map<std::string, std::vector<Lifetime>>;

void check_header(Context& context);  // schema, mesh, policy, streams
void check_units(Context& context);   // names, parents, roots, call counts
void check_layout(Context& context);  // groups, parameters, unit and model totals
void check_orders(Context& context);
Lifetimes check_schedule(Context& context);
void check_memory(Context& context, const Lifetimes& lifetimes);
void check_communication(Context& context);
void check_diagnostics(Context& context);

}  // namespace mfsdp::schema::check
