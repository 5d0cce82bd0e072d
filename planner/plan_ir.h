#pragma once
// The planner's working representation: the model, the units a scope registered, and what each
// pass adds. Passes (planner/passes.h) fill it in order; emit turns it into a schema::Plan.

#include <optional>
#include <string>
#include <vector>

#include "planner/torchscript/model_ir.h"
#include "planner/trace_input.h"
#include "schema/plan.h"

namespace mfsdp::planner {

struct UnitIR {
  int module = -1;           // index into ModelIR::modules: the unit's first module
  std::vector<int> modules;  // every module of the unit, in definition order (two or more: merged)
  std::string name;
  int parent = -1;  // index into PlanIR::units of the nearest enclosing unit
  bool root = false;
  std::vector<int> params;   // owned tensors (after hoisting), in definition order
  std::vector<int> buffers;  // recorded tensors, in definition order
  int64_t call_count = 0;
  bool conditional = false;
  bool repeated = false;
  bool kept_after_forward = false;
  bool checkpoint = false;            // activation checkpointing, as registered
  bool reshard_after_forward = true;  // as registered, else the policy's
  std::vector<schema::Group> groups;
  int64_t unsharded_bytes = 0;
  int64_t sharded_bytes = 0;
};

// A unit's forward call: entering or leaving call number `call` of unit `unit`.
struct UnitCall {
  bool enter = true;
  int unit = -1;
  int64_t call = 0;
};

struct PlanIR {
  const ModelIR* model = nullptr;
  schema::ModelInfo model_info;
  schema::Mesh mesh;
  schema::Policy policy;
  std::vector<UnitIR> units;        // registration order
  std::vector<int> roots;           // registration order
  std::vector<int> unit_by_module;  // module index -> unit index or -1; set by link_units
  std::vector<UnitCall> unit_trace;
  std::vector<int> forward_order;
  std::vector<int> backward_order;
  std::vector<schema::ScheduleEntry> schedule;
  schema::Memory memory;
  std::vector<schema::Diagnostic> diagnostics;
  std::optional<TracedRun> traced_run;  // units are indices into `units`; set by the scope
  std::optional<schema::Trace> trace;   // the plan's trace section; set by derive_orders

  int unit_of_module(int module) const;  // -1 when the module is not (part of) a unit
  void diagnose(std::string severity, std::string code, std::string message, std::string where);
};

// Unit calls from the model's module calls: a unit of one module begins and ends with it, a
// merged unit begins with the first of its modules to begin and ends when all have ended
// (each runs once per call, one after another: link_units checks it).
class UnitCallTracker {
 public:
  explicit UnitCallTracker(const PlanIR& ir);
  int enter(int module);  // the unit whose call this module's beginning begins, or -1
  int exit(int module);   // the unit whose call this module's end ends, or -1

 private:
  const PlanIR& ir_;
  std::vector<size_t> begun_, ended_;  // per unit: its modules begun and ended in its open call
};

}  // namespace mfsdp::planner
