// The plan's other sections: header (model, mesh, policy, streams), memory and communication,
// diagnostics, prediction, training, activations and trace, and the JSON fallback.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "schema/diff/differ.h"
#include "schema/plan_json.h"

namespace mfsdp::schema::diff {

void Differ::compare_header() {
  field("generator", quoted(old_.generator), quoted(new_.generator));
  const ModelInfo& a = old_.model;
  const ModelInfo& b = new_.model;
  field("model.path", quoted(a.path), quoted(b.path));
  field("model.sha256", quoted(a.sha256), quoted(b.sha256));
  field("model.structural_hash", quoted(a.structural_hash), quoted(b.structural_hash));
  field("model.modules", text_of(a.modules), text_of(b.modules));
  field("model.parameters", text_of(a.parameters), text_of(b.parameters));
  field("model.parameter_numel", text_of(a.parameter_numel), text_of(b.parameter_numel));
  field("mesh.world_size", text_of(old_.mesh.world_size), text_of(new_.mesh.world_size));
  field("mesh.shard_size", text_of(old_.mesh.shard_size), text_of(new_.mesh.shard_size));
  field("mesh.replicate_size", text_of(old_.mesh.replicate_size),
        text_of(new_.mesh.replicate_size));
  const Policy& p = old_.policy;
  const Policy& q = new_.policy;
  field("policy.param_dtype", text_of(p.param_dtype), text_of(q.param_dtype));
  field("policy.reduce_dtype", quoted(p.reduce_dtype), quoted(q.reduce_dtype));
  field("policy.reshard_after_forward", text_of(p.reshard_after_forward),
        text_of(q.reshard_after_forward));
  field("policy.forward_prefetch", text_of(p.forward_prefetch), text_of(q.forward_prefetch));
  field("policy.backward_prefetch", text_of(p.backward_prefetch), text_of(q.backward_prefetch));
  field("policy.resident_budget_bytes", text_of(p.resident_budget_bytes),
        text_of(q.resident_budget_bytes));
  field("policy.unified_stream", text_of(p.unified_stream), text_of(q.unified_stream));
  field("policy.align_bytes", text_of(p.align_bytes), text_of(q.align_bytes));
  const auto streams = [](const Plan& plan) {
    std::vector<std::string> out;
    for (const Stream& s : plan.streams) {
      std::string line = s.name + ":";
      for (const auto& c : s.collectives) line += " " + c;
      out.push_back(line);
    }
    return out;
  };
  field("streams", text_of(streams(old_)), text_of(streams(new_)));
}

void Differ::compare_memory_and_communication() {
  const Memory& m = old_.memory;
  const Memory& n = new_.memory;
  quantity("memory.sharded_param_bytes", m.sharded_param_bytes, n.sharded_param_bytes);
  quantity("memory.sharded_grad_bytes", m.sharded_grad_bytes, n.sharded_grad_bytes);
  quantity("memory.peak_unsharded_bytes", m.peak_unsharded_bytes, n.peak_unsharded_bytes);
  field("memory.peak_at", quoted(mapped_point(m.peak_at)), quoted(n.peak_at));
  quantity("memory.slot_bytes", m.slot_bytes, n.slot_bytes);
  // Which units share a slot, "layers.0 & layers.2" ('+' joins a merged unit's modules);
  // slot_bytes above tells the sizes.
  const auto slots = [this](const Memory& memory, bool is_old) {
    std::vector<std::string> out;
    for (const Slot& slot : memory.slots) {
      std::string line;
      for (const auto& unit : slot.units) {
        line += (line.empty() ? "" : " & ") + (is_old ? mapped(unit) : unit);
      }
      out.push_back(line);
    }
    return out;
  };
  field("memory.slots", text_of(slots(m, true)), text_of(slots(n, false)));
  compare_activations();
  const Communication& c = old_.communication;
  const Communication& d = new_.communication;
  quantity("communication.all_gather_count", c.all_gather_count, d.all_gather_count);
  quantity("communication.all_gather_bytes", c.all_gather_bytes, d.all_gather_bytes);
  quantity("communication.reduce_scatter_count", c.reduce_scatter_count, d.reduce_scatter_count);
  quantity("communication.reduce_scatter_bytes", c.reduce_scatter_bytes, d.reduce_scatter_bytes);
  quantity("communication.all_reduce_bytes", c.all_reduce_bytes, d.all_reduce_bytes);
}

void Differ::compare_diagnostics() {
  if (!shown("diagnostics")) return;
  using Key = std::tuple<std::string, std::string, std::string>;
  const auto key_of = [](const Diagnostic& d) { return Key{d.severity, d.code, d.where}; };
  std::map<Key, std::vector<const Diagnostic*>> old_by_key;
  for (const Diagnostic& d : old_.diagnostics) {
    // `where` may name a unit: compare under its new name.
    old_by_key[Key{d.severity, d.code, mapped(d.where)}].push_back(&d);
  }
  std::vector<DiagnosticChange> removed;
  for (const Diagnostic& d : new_.diagnostics) {
    auto& candidates = old_by_key[key_of(d)];
    if (candidates.empty()) {
      diff_.diagnostics.push_back({DiagnosticChange::Kind::kAdded, d, ""});
      continue;
    }
    // Prefer an identical message, so reordering alone reports nothing.
    auto it = std::find_if(candidates.begin(), candidates.end(),
                           [&](const Diagnostic* o) { return o->message == d.message; });
    if (it == candidates.end()) {
      it = candidates.begin();
      diff_.diagnostics.push_back({DiagnosticChange::Kind::kChanged, d, (*it)->message});
    }
    candidates.erase(it);
  }
  for (const Diagnostic& d : old_.diagnostics) {
    auto& left = old_by_key[Key{d.severity, d.code, mapped(d.where)}];
    const auto it = std::find(left.begin(), left.end(), &d);
    if (it != left.end()) removed.push_back({DiagnosticChange::Kind::kRemoved, d, ""});
  }
  diff_.diagnostics.insert(diff_.diagnostics.end(), removed.begin(), removed.end());
}

// The predicted step as one field: it follows measured times, so it is ignored by default.
void Differ::compare_prediction() {
  if (!shown("prediction")) return;
  const auto text = [](const std::optional<StepPrediction>& p) {
    return p ? plan_prediction_json(*p).dump() : std::string("null");
  };
  field("prediction", text(old_.prediction), text(new_.prediction));
}

// The training section key by key ("null" where a plan does not set the key).
void Differ::compare_training() {
  const auto section = [](const std::optional<Training>& t) {
    return t ? training_to_json(*t) : ordered_json::object();
  };
  const ordered_json old_section = section(old_.training);
  const ordered_json new_section = section(new_.training);
  std::set<std::string> keys;
  for (auto it = old_section.begin(); it != old_section.end(); ++it) keys.insert(it.key());
  for (auto it = new_section.begin(); it != new_section.end(); ++it) keys.insert(it.key());
  for (const std::string& key : keys) {
    const auto text = [&key](const ordered_json& j) {
      return j.contains(key) ? j.at(key).dump() : std::string("null");
    };
    field("training." + key, text(old_section), text(new_section));
  }
}

// Measured activations: quantities when both plans have them, else present against null;
// per unit the saved bytes, by the unit's name in the new plan.
void Differ::compare_activations() {
  const std::optional<Activations>& m = old_.memory.activations;
  const std::optional<Activations>& n = new_.memory.activations;
  if (!m || !n) {
    field("memory.activations", m ? "present" : "null", n ? "present" : "null");
    return;
  }
  quantity("memory.activations.microbatch", m->microbatch, n->microbatch);
  quantity("memory.activations.peak_bytes", m->peak_bytes, n->peak_bytes);
  field("memory.activations.peak_at", quoted(mapped_point(m->peak_at)), quoted(n->peak_at));
  quantity("memory.activations.output_bytes", m->output_bytes, n->output_bytes);
  field("memory.activations.loss", quoted(m->loss), quoted(n->loss));
  quantity("memory.activations.combined_peak_bytes", m->combined_peak_bytes,
           n->combined_peak_bytes);
  if (!shown("memory.activations.units")) return;
  std::map<std::string, int64_t> old_saved;
  for (const UnitActivations& unit : m->units) old_saved[mapped(unit.unit)] = unit.saved_bytes;
  for (const UnitActivations& unit : n->units) {
    const auto it = old_saved.find(unit.unit);
    const std::string name = "memory.activations.units[" + unit.unit + "].saved_bytes";
    if (it == old_saved.end()) {
      field(name, "null", text_of(unit.saved_bytes));
      continue;
    }
    if (it->second != unit.saved_bytes) {
      diff_.quantities.push_back({name, it->second, unit.saved_bytes});
    }
    old_saved.erase(it);
  }
  for (const auto& [unit, bytes] : old_saved) {
    field("memory.activations.units[" + unit + "].saved_bytes", text_of(bytes), "null");
  }
}

// The trace section as fields: its lists, and per unit its times as a JSON object ("null"
// where a plan has no trace or no time for the unit).
void Differ::compare_trace() {
  const auto list = [](const std::optional<Trace>& trace, std::vector<std::string> Trace::*member) {
    return trace ? text_of((*trace).*member) : "null";
  };
  field("trace.inputs", list(old_.trace, &Trace::inputs), list(new_.trace, &Trace::inputs));
  field("trace.differs_from_static", list(old_.trace, &Trace::differs_from_static),
        list(new_.trace, &Trace::differs_from_static));
  compare_trace_work();
  if (!shown("trace.times")) return;
  const auto time_text = [](const UnitTime& time) {
    ordered_json j = ordered_json::object();
    j["forward_ms"] = time.forward_ms;
    j["backward_ms"] = time.backward_ms;
    if (time.pre_forward_ms) j["pre_forward_ms"] = *time.pre_forward_ms;
    if (time.post_forward_ms) j["post_forward_ms"] = *time.post_forward_ms;
    return j.dump();
  };
  // The step's measured figures beside the units' (docs/plan-format.md#trace).
  const auto step_text = [](const std::optional<Trace>& trace) -> std::string {
    if (!trace) return "null";
    const ordered_json j = measured_step_json(*trace);
    return j.empty() ? "null" : j.dump();
  };
  field("trace.times.step", step_text(old_.trace), step_text(new_.trace));
  std::map<std::string, std::string> old_times;  // by the unit's name in the new plan
  if (old_.trace) {
    for (const UnitTime& time : old_.trace->times) old_times[mapped(time.unit)] = time_text(time);
  }
  std::set<std::string> seen;
  if (new_.trace) {
    for (const UnitTime& time : new_.trace->times) {
      const auto it = old_times.find(time.unit);
      seen.insert(time.unit);
      field("trace.times[" + time.unit + "]", it == old_times.end() ? "null" : it->second,
            time_text(time));
    }
  }
  if (old_.trace) {
    for (const UnitTime& time : old_.trace->times) {
      if (!seen.count(mapped(time.unit))) {
        field("trace.times[" + mapped(time.unit) + "]", time_text(time), "null");
      }
    }
  }
}

// A shape-only trace's device and work (deterministic, so compared by default): per unit its
// work as a JSON object, and the loss's as trace.work[(loss)].
void Differ::compare_trace_work() {
  const auto device = [](const std::optional<Trace>& trace) -> std::string {
    return trace && trace->device ? text_of(*trace->device) : "null";  // null: on the CPU
  };
  field("trace.device", device(old_.trace), device(new_.trace));
  const auto attention = [](const std::optional<Trace>& trace) -> std::string {
    return trace && trace->attention ? text_of(*trace->attention) : "null";  // null: as traced
  };
  field("trace.attention", attention(old_.trace), attention(new_.trace));
  if (!shown("trace.work")) return;
  const auto work_text = [](const Work& work) { return work_to_json(work).dump(); };
  const auto works = [&](const std::optional<Trace>& trace, bool renamed) {
    std::map<std::string, std::string> out;
    if (!trace) return out;
    for (const UnitWork& w : trace->work) {
      ordered_json j = ordered_json::object();
      j["pre_forward"] = work_to_json(w.pre_forward);
      j["post_forward"] = work_to_json(w.post_forward);
      j["backward"] = work_to_json(w.backward);
      out[renamed ? mapped(w.unit) : w.unit] = j.dump();
    }
    if (trace->loss_work) out["(loss)"] = work_text(*trace->loss_work);
    return out;
  };
  const std::map<std::string, std::string> before = works(old_.trace, true);
  const std::map<std::string, std::string> after = works(new_.trace, false);
  std::set<std::string> units;
  for (const auto& [unit, text] : before) units.insert(unit);
  for (const auto& [unit, text] : after) units.insert(unit);
  for (const std::string& unit : units) {
    const auto b = before.find(unit), a = after.find(unit);
    field("trace.work[" + unit + "]", b == before.end() ? "null" : b->second,
          a == after.end() ? "null" : a->second);
  }
}

// The plans as JSON, without what the options ignore and without the sizes that follow
// from a unit's layout, the mesh and the policy (reported with their causes).
ordered_json Differ::visible_json(const Plan& plan) const {
  ordered_json doc = plan_to_json(plan);
  for (auto& unit : doc["units"]) {
    unit.erase("unsharded_bytes");
    unit.erase("sharded_bytes");
    for (auto& group : unit["groups"]) group.erase("shard_numel");
  }
  if (options_.ignores("trace.times") && doc.contains("trace")) {
    const ordered_json measured = measured_step_json(*plan.trace);
    for (auto it = measured.begin(); it != measured.end(); ++it) doc["trace"].erase(it.key());
  }
  for (const std::string& name : diff_field_names()) {
    if (!options_.ignores(name)) continue;
    const size_t dot = name.find('.');
    if (dot == std::string::npos) {
      doc.erase(name);
    } else if (name.compare(0, dot, "units") == 0) {
      const std::string key = name.substr(dot + 1) == "ownership" ? "groups" : name.substr(dot + 1);
      if (doc.contains("units")) {
        for (auto& unit : doc["units"]) unit.erase(key);
      }
    } else if (doc.contains(name.substr(0, dot))) {
      doc[name.substr(0, dot)].erase(name.substr(dot + 1));
    }
  }
  return doc;
}

void Differ::add_fallback() {
  FieldChange change;
  if (first_difference(visible_json(old_), visible_json(new_), "", change)) {
    diff_.fields.push_back(change);
  }
}

}  // namespace mfsdp::schema::diff
