#pragma once
// Getting control at unit boundaries of a TorchScript model, where no Python hooks exist:
// identity operators (mfsdp::unit_enter, mfsdp::unit_exit) with autograd kernels are inserted
// into each unit class's forward graph, on its tensor inputs at entry and on its tensor
// outputs before return. Their forwards call UnitHooks::pre_forward/post_forward; the
// backward of unit_exit calls pre_backward. Instances of a class share one graph, so every
// instance carries an int attribute `_mfsdp_unit` (its unit id, -1 when it is not a unit)
// that the inserted code reads.

#include <string>
#include <vector>

#include <torch/script.h>

namespace mfsdp::planner {

// Instruments `model` so that unit i is the module at `unit_paths[i]` ("" or "<root>" for the
// model). Must run after torch::jit::load and before the first forward (graph executors cache
// their optimised graphs). Throws Error(kPlanning) naming the unit and the reason when a
// unit's outputs cannot be wrapped (only Tensor, and tuples/lists of Tensor and non-tensor
// values, can be); nothing is left half-instrumented in that case. Also throws Error(kPlanning),
// before changing anything, for a path that names no module (or the same instance twice), a
// unit without forward (a ModuleList), a second call on one model, and a model whose forward,
// or a unit class's forward, has already run.
//
// `checkpointed[i]` (missing: false) lets unit i run under activation checkpointing when the
// hooks ask for it (UnitHooks::checkpointed, planner/torchscript/unit_checkpoint.h): its
// class's forward then also reports its arguments (mfsdp::unit_call). Error(kPlanning) when
// such a unit contains another unit, or its forward takes an argument a recompute cannot
// re-create (a dict or an object).
void instrument_units(torch::jit::Module& model, const std::vector<std::string>& unit_paths,
                      const std::vector<bool>& checkpointed = {});

// The same for units of one or more modules: unit i is made of the modules at
// `unit_modules[i]`. A merged unit (two or more modules, which must run one after another,
// each once per call of the unit) reports one pre_forward when the first of its modules
// begins, one post_forward when the last ends and one pre_backward when gradients reach the
// first of its modules' outputs; a module called twice in one call of its unit is an
// Error(kModel) from forward. A merged unit cannot be checkpointed (Error(kPlanning)).
void instrument_unit_modules(torch::jit::Module& model,
                             const std::vector<std::vector<std::string>>& unit_modules,
                             const std::vector<bool>& checkpointed = {});

}  // namespace mfsdp::planner
