#pragma once
// One unit at run time: its groups (shards, main gradients, slot buffers), where its
// parameters live in the model, its compute and shard states, and the gradients of this
// microbatch until they are reduce-scattered. The context (context_schedule.cpp) decides when
// a unit is gathered, bound, resharded and reduced; this class does the unit's own part.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "executor/runtime/flat_group.h"
#include "executor/runtime/param_binding.h"
#include "executor/runtime/stream.h"
#include "executor/runtime/unit_state.h"
#include "schema/plan.h"

namespace mfsdp::executor {

class UnitRuntime {
 public:
  const schema::Unit* plan = nullptr;
  int slot = -1;  // index into the plan's memory.slots; -1 without one
  std::vector<FlatGroup> groups;
  std::vector<GroupBinding> bindings;  // per group
  UnitState state = UnitState::kResting;
  ShardState shard_state = ShardState::kSharded;
  std::shared_ptr<Event> gathered;                      // the end of its last all-gather
  int64_t forward_start_us = 0, backward_start_us = 0;  // for the timeline

  const std::string& name() const { return plan->name; }
  // Its parameters are bound into the model (its gathered buffers, or views of them).
  bool bound() const { return bound_; }

  // Binds the gathered parameters into the model. When `training`, each trainable group
  // reports its parameters' gradients to `on_gradient(g, grads)` once it has them all, and a
  // tied parameter's gradients from earlier uses to `on_early(g, p, gradient)`.
  // Error(kInternal) when bound twice in one microbatch: that would register a second gradient
  // hook and lose a gradient.
  void bind(bool training, const std::function<void(int g, std::vector<at::Tensor>&&)>& on_gradient,
            const std::function<void(int g, size_t p, at::Tensor&&)>& on_early);
  // Puts empty tensors on `device` where its parameters were bound.
  void unbind(const at::Device& device);

  // Keeps group `g`'s gradients; true once every trainable group's have arrived.
  // Error(kInternal) when one group's arrive twice in one backward.
  bool take_gradients(int g, std::vector<at::Tensor>&& grads);
  // Group `g`'s gradients of this microbatch; nullptr when none arrived.
  const std::vector<at::Tensor>* gradients(size_t g) const;
  // Forgets them, once reduce-scattered.
  void clear_gradients();

  // The end of a microbatch or an evaluation: resting, its groups' gathered buffers
  // released, nothing bound this microbatch.
  void settle();

 private:
  bool bound_ = false;
  bool bound_this_microbatch_ = false;
  std::vector<std::optional<std::vector<at::Tensor>>> grads_;  // per group, this microbatch
  int grads_missing_ = 0;
};

}  // namespace mfsdp::executor
