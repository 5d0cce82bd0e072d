#pragma once
// The explicit sharding scope (Megatron-FSDP v2's fully_shard_context): units are registered
// inside one active scope, and everything lazy FSDPs decide at the first forward is decided
// when it closes.
//
//   ShardedModel model = ShardedModel::load("model.pt");
//   ShardingScope scope(model, mesh, policy);
//   scope.fully_shard("layers.0");   // or the free function fully_shard("layers.0")
//   schema::Plan plan = scope.finalize();

#include <string>
#include <vector>

#include <optional>

#include "planner/sharded_model.h"
#include "planner/trace_input.h"
#include "schema/plan.h"

namespace mfsdp::planner {

// Per-unit choices of a fully_shard call.
struct UnitOptions {
  // Activation checkpointing: the unit's forward keeps nothing for backward, which recomputes
  // it (planner/torchscript/unit_checkpoint.h). The unit may hold no other unit.
  bool checkpoint = false;
  // Resharding after forward for this unit, as FSDP2's per-module reshard_after_forward: false
  // keeps its parameters gathered from its forward to its backward (more memory, one
  // all-gather less). Unset: the policy's reshard_after_forward.
  std::optional<bool> reshard_after_forward;
};

class ShardingScope {
 public:
  // Opens the scope on this thread. Throws Error(kPlanning) if another scope is active.
  ShardingScope(ShardedModel& model, schema::Mesh mesh, schema::Policy policy);
  // A scope closed without finalize() forgets its registrations.
  ~ShardingScope();
  ShardingScope(const ShardingScope&) = delete;
  ShardingScope& operator=(const ShardingScope&) = delete;

  // Makes the module at `path` ("" or "<root>" for the model) a unit. Throws Error(kPlanning)
  // after finalize, for an unknown path, a module that already is a unit, or one that contains
  // or sits inside a unit of another scope.
  void fully_shard(const std::string& path, UnitOptions options = {});
  // Makes the modules at `paths` one unit (FSDP2's fully_shard([a, b])): gathered once for all
  // of them, from the first one's forward to the last one's end. One path is the same as
  // fully_shard(path). Throws Error(kPlanning) as fully_shard(path) does for each, and for the
  // model itself, a module listed twice or inside another of them, and a checkpointed merged
  // unit; finalize() refuses modules that do not run one after another, once each, that sit
  // in different units, or that hold another unit.
  void fully_shard(const std::vector<std::string>& paths, UnitOptions options = {});
  // Plans with the unit order and calls a traced step observed (planner/trace_input.h)
  // instead of the static call graph alone. `run.units` must be the registered units' module
  // paths in registration order, and its checkpointed flags theirs, as finalize() checks.
  // Throws Error(kPlanning) after finalize.
  void use_trace(TracedRun run);
  // Runs the planner passes and closes the scope. Throws Error(kPlanning) on a second call,
  // when no unit was registered, or when the units cannot be planned (a checkpointed unit
  // that contains another unit among them).
  schema::Plan finalize();

  // Per unit, in registration order: its module indices in definition order.
  const std::vector<std::vector<int>>& units() const { return units_; }
  // The scope open on this thread, or nullptr.
  static ShardingScope* active();

 private:
  void close();
  // Throws Error(kPlanning) when the module is a unit already, or holds or sits in a unit of
  // another scope.
  void check_registrable(int module, const std::string& name) const;

  ShardedModel& model_;
  schema::Mesh mesh_;
  schema::Policy policy_;
  int id_ = 0;
  std::vector<std::vector<int>> units_;                     // module indices, registration order
  std::vector<bool> checkpoint_;                            // per unit, registration order
  std::vector<std::optional<bool>> reshard_after_forward_;  // per unit, registration order
  std::optional<TracedRun> trace_;
  bool finalized_ = false;
};

// fully_shard on the active scope; Error(kPlanning) when there is none.
void fully_shard(const std::string& path, UnitOptions options = {});
void fully_shard(const std::vector<std::string>& paths, UnitOptions options = {});

}  // namespace mfsdp::planner
