#pragma once
// Activation checkpointing of a unit, inside the unit operators (unit_ops.cpp). A checkpointed
// call runs its forward with grad mode off, so autograd saves nothing inside it; the unit's
// outputs instead get one autograd node that keeps the call's arguments, the parameters the
// unit read and the RNG state. When backward reaches that node it calls the unit's pre_backward
// hook (the executor gathers and waits for the unit's parameters there, as for any unit),
// re-runs the unit's forward with grad enabled on detached copies of the arguments and
// parameters, the RNG state restored so dropout draws the same masks, differentiates it, and
// hands the gradients on to the arguments' and parameters' own autograd edges: the rest of the
// backward is the one a call without checkpointing has.
//
// Calls nest neither here nor in the plan: a checkpointed unit contains no other unit
// (instrument_units refuses one). State is per thread: forward's open calls on the thread that
// runs forward, a recompute on the thread backward runs it on.

#include <cstdint>
#include <optional>
#include <vector>

#include <torch/script.h>

#include "planner/torchscript/unit_hooks.h"

namespace mfsdp::planner::checkpoint {

// mfsdp::unit_call, ahead of unit_enter in the forward of a class with a checkpointed unit:
// remembers the call's module and arguments (a tuple) when `hooks` checkpoint `unit` and grad
// mode is on; otherwise does nothing.
void on_call(UnitHooks& hooks, int64_t unit, const c10::IValue& self, const c10::IValue& args);

// Whether this thread is re-running `unit`'s forward for its backward: its operators then call
// no hooks, unit_enter casts as it always does and unit_exit hands its outputs to capture().
bool recomputing(int64_t unit);
void capture(int64_t unit, at::TensorList outputs);

// unit_enter, after pre_forward bound the unit's parameters: opens the call unit_call
// remembered for `unit`, if any, and turns grad mode off. Whether the call is checkpointed.
bool begin(int64_t unit);

// unit_exit: closes `unit`'s open call and restores grad mode. Returns the outputs to hand on
// (aliases whose gradients lead to the recompute), or nullopt when `unit` has no open call.
std::optional<std::vector<at::Tensor>> end(int64_t unit, at::TensorList outputs);

}  // namespace mfsdp::planner::checkpoint
