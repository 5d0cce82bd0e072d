#include "schema/plan_json.h"

#include <nlohmann/json.hpp>

#include "schema/error.h"

namespace mfsdp::schema {
namespace {

using nlohmann::ordered_json;

// Keys are emitted in the order of the struct members in plan.h; parse_plan reads the same names.

ordered_json to_json(const Stream& stream);
ordered_json to_json(const ParamLayout& param);
ordered_json to_json(const Group& group);
ordered_json to_json(const BufferInfo& buffer);
ordered_json to_json(const Unit& unit);
ordered_json to_json(const ScheduleEntry& entry);
ordered_json to_json(const Slot& slot);
ordered_json to_json(const Diagnostic& diagnostic);
ordered_json to_json(const UnitTime& time);
ordered_json to_json(const UnitActivations& unit);
ordered_json to_json(const UnitWork& work);

template <typename T>
ordered_json array_of(const std::vector<T>& items) {
  ordered_json j = ordered_json::array();
  for (const T& item : items) j.push_back(to_json(item));
  return j;
}

ordered_json optional_text(const std::optional<std::string>& text) {
  return text ? ordered_json(*text) : ordered_json(nullptr);
}

ordered_json to_json(const ModelInfo& model) {
  ordered_json j = ordered_json::object();
  j["path"] = model.path;
  j["sha256"] = model.sha256;
  j["structural_hash"] = model.structural_hash;
  j["modules"] = model.modules;
  j["parameters"] = model.parameters;
  j["parameter_numel"] = model.parameter_numel;
  return j;
}

ordered_json to_json(const Mesh& mesh) {
  ordered_json j = ordered_json::object();
  j["world_size"] = mesh.world_size;
  j["shard_size"] = mesh.shard_size;
  j["replicate_size"] = mesh.replicate_size;
  return j;
}

ordered_json to_json(const Policy& policy) {
  ordered_json j = ordered_json::object();
  j["param_dtype"] = optional_text(policy.param_dtype);
  j["reduce_dtype"] = policy.reduce_dtype;
  j["reshard_after_forward"] = policy.reshard_after_forward;
  j["forward_prefetch"] = policy.forward_prefetch;
  j["backward_prefetch"] = policy.backward_prefetch;
  j["resident_budget_bytes"] = policy.resident_budget_bytes;
  j["unified_stream"] = policy.unified_stream;
  j["align_bytes"] = policy.align_bytes;
  return j;
}

ordered_json to_json(const Stream& stream) {
  ordered_json j = ordered_json::object();
  j["name"] = stream.name;
  j["collectives"] = stream.collectives;
  return j;
}

ordered_json to_json(const ParamLayout& param) {
  ordered_json j = ordered_json::object();
  j["name"] = param.name;
  j["shape"] = param.shape;
  j["numel"] = param.numel;
  j["offset"] = param.offset;
  j["aliases"] = param.aliases;
  return j;
}

ordered_json to_json(const Group& group) {
  ordered_json j = ordered_json::object();
  j["dtype"] = group.dtype;
  j["requires_grad"] = group.requires_grad;
  j["numel"] = group.numel;
  j["padded_numel"] = group.padded_numel;
  j["shard_numel"] = group.shard_numel;
  j["params"] = array_of(group.params);
  return j;
}

ordered_json to_json(const BufferInfo& buffer) {
  ordered_json j = ordered_json::object();
  j["name"] = buffer.name;
  j["shape"] = buffer.shape;
  j["dtype"] = buffer.dtype;
  return j;
}

ordered_json to_json(const Unit& unit) {
  ordered_json j = ordered_json::object();
  j["name"] = unit.name;
  j["type"] = unit.type;
  if (!unit.modules.empty()) j["modules"] = unit.modules;
  j["parent"] = optional_text(unit.parent);
  j["root"] = unit.root;
  j["call_count"] = unit.call_count;
  j["conditional"] = unit.conditional;
  j["repeated"] = unit.repeated;
  j["kept_after_forward"] = unit.kept_after_forward;
  if (unit.checkpoint) j["checkpoint"] = true;
  j["unsharded_bytes"] = unit.unsharded_bytes;
  j["sharded_bytes"] = unit.sharded_bytes;
  j["groups"] = array_of(unit.groups);
  j["buffers"] = array_of(unit.buffers);
  return j;
}

ordered_json to_json(const ScheduleEntry& entry) {
  ordered_json j = ordered_json::object();
  j["phase"] = entry.phase;
  j["point"] = entry.point;
  j["unit"] = optional_text(entry.unit);
  j["call"] = entry.call;
  j["all_gather"] = entry.all_gather;
  j["wait"] = entry.wait;
  j["reshard"] = entry.reshard;
  j["reduce_scatter"] = entry.reduce_scatter;
  j["unsharded_bytes"] = entry.unsharded_bytes;
  return j;
}

ordered_json to_json(const Slot& slot) {
  ordered_json j = ordered_json::object();
  j["index"] = slot.index;
  j["bytes"] = slot.bytes;
  j["units"] = slot.units;
  return j;
}

ordered_json to_json(const UnitActivations& unit) {
  ordered_json j = ordered_json::object();
  j["unit"] = unit.unit;
  j["saved_bytes"] = unit.saved_bytes;
  return j;
}

ordered_json to_json(const Activations& a) {
  ordered_json j = ordered_json::object();
  j["microbatch"] = a.microbatch;
  j["peak_bytes"] = a.peak_bytes;
  j["peak_at"] = a.peak_at;
  j["output_bytes"] = a.output_bytes;
  j["loss"] = a.loss;
  j["combined_peak_bytes"] = a.combined_peak_bytes;
  j["units"] = array_of(a.units);
  return j;
}

ordered_json to_json(const Memory& memory) {
  ordered_json j = ordered_json::object();
  j["sharded_param_bytes"] = memory.sharded_param_bytes;
  j["sharded_grad_bytes"] = memory.sharded_grad_bytes;
  j["peak_unsharded_bytes"] = memory.peak_unsharded_bytes;
  j["peak_at"] = memory.peak_at;
  j["slot_bytes"] = memory.slot_bytes;
  j["slots"] = array_of(memory.slots);
  // Absent rather than null, so plans made without a trace keep their bytes.
  if (memory.activations) j["activations"] = to_json(*memory.activations);
  return j;
}

ordered_json to_json(const Communication& communication) {
  ordered_json j = ordered_json::object();
  j["all_gather_count"] = communication.all_gather_count;
  j["all_gather_bytes"] = communication.all_gather_bytes;
  j["reduce_scatter_count"] = communication.reduce_scatter_count;
  j["reduce_scatter_bytes"] = communication.reduce_scatter_bytes;
  j["all_reduce_bytes"] = communication.all_reduce_bytes;
  return j;
}

ordered_json to_json(const Diagnostic& diagnostic) {
  ordered_json j = ordered_json::object();
  j["severity"] = diagnostic.severity;
  j["code"] = diagnostic.code;
  j["message"] = diagnostic.message;
  j["where"] = diagnostic.where;
  return j;
}

ordered_json to_json(const UnitTime& time) {
  ordered_json j = ordered_json::object();
  j["unit"] = time.unit;
  j["forward_ms"] = time.forward_ms;
  j["backward_ms"] = time.backward_ms;
  if (time.pre_forward_ms) j["pre_forward_ms"] = *time.pre_forward_ms;
  if (time.post_forward_ms) j["post_forward_ms"] = *time.post_forward_ms;
  return j;
}

ordered_json to_json(const ClassWork& work) {
  ordered_json j = ordered_json::object();
  j["flops"] = work.flops;
  j["bytes"] = work.bytes;
  j["ops"] = work.ops;
  return j;
}

ordered_json to_json(const Work& work) {
  ordered_json j = ordered_json::object();
  j["matmul"] = to_json(work.matmul);
  j["attention"] = to_json(work.attention);
  j["elementwise"] = to_json(work.elementwise);
  j["embedding"] = to_json(work.embedding);
  return j;
}

ordered_json to_json(const UnitWork& work) {
  ordered_json j = ordered_json::object();
  j["unit"] = work.unit;
  j["pre_forward"] = to_json(work.pre_forward);
  j["post_forward"] = to_json(work.post_forward);
  j["backward"] = to_json(work.backward);
  return j;
}

ordered_json to_json(const Trace& trace) {
  ordered_json j = ordered_json::object();
  j["inputs"] = trace.inputs;
  j["differs_from_static"] = trace.differs_from_static;
  j["times"] = array_of(trace.times);
  if (trace.loss_ms) j["loss_ms"] = *trace.loss_ms;
  if (trace.timed_steps) j["timed_steps"] = *trace.timed_steps;
  if (trace.threads) j["threads"] = *trace.threads;
  if (trace.calibration_gflops) j["calibration_gflops"] = *trace.calibration_gflops;
  // Absent for a CPU trace, so that its plans keep their bytes.
  if (trace.device) j["device"] = *trace.device;
  if (trace.attention) j["attention"] = *trace.attention;
  if (!trace.work.empty()) j["work"] = array_of(trace.work);
  if (trace.loss_work) j["loss_work"] = to_json(*trace.loss_work);
  return j;
}

}  // namespace

ordered_json work_to_json(const Work& work) {
  return to_json(work);
}

ordered_json plan_prediction_json(const StepPrediction& p) {
  ordered_json j = ordered_json::object();
  j["profile"] = p.profile;
  j["microbatches"] = p.microbatches;
  j["microbatch_samples"] = p.microbatch_samples;
  j["optimizer"] = p.optimizer;
  j["compute_scale"] = p.compute_scale;
  j["step_ms"] = p.step_ms;
  j["compute_ms"] = p.compute_ms;
  j["exposed_comm_ms"] = p.exposed_comm_ms;
  j["contention_ms"] = p.contention_ms;
  if (p.memory_bytes) j["memory_bytes"] = *p.memory_bytes;
  return j;
}

ordered_json training_to_json(const Training& t) {
  ordered_json j = ordered_json::object();
  const auto put = [&j](const char* key, const auto& value) {
    if (value) j[key] = *value;
  };
  put("steps", t.steps);
  put("global_batch", t.global_batch);
  put("microbatches", t.microbatches);
  put("optimizer", t.optimizer);
  put("lr", t.lr);
  put("weight_decay", t.weight_decay);
  put("betas", t.betas);
  put("momentum", t.momentum);
  put("warmup", t.warmup);
  put("lr_schedule", t.lr_schedule);
  put("clip_grad_norm", t.clip_grad_norm);
  put("loss", t.loss);
  put("seed", t.seed);
  return j;
}

ordered_json plan_to_json(const Plan& plan) {
  ordered_json j = ordered_json::object();
  j["schema"] = plan.schema;
  j["generator"] = plan.generator;
  j["model"] = to_json(plan.model);
  j["mesh"] = to_json(plan.mesh);
  j["policy"] = to_json(plan.policy);
  j["streams"] = array_of(plan.streams);
  j["units"] = array_of(plan.units);
  j["roots"] = plan.roots;
  j["forward_order"] = plan.forward_order;
  j["backward_order"] = plan.backward_order;
  j["schedule"] = array_of(plan.schedule);
  j["memory"] = to_json(plan.memory);
  j["communication"] = to_json(plan.communication);
  j["diagnostics"] = array_of(plan.diagnostics);
  // Absent rather than null, so plans made without a trace keep their bytes.
  if (plan.trace) j["trace"] = to_json(*plan.trace);
  if (plan.prediction) j["prediction"] = plan_prediction_json(*plan.prediction);
  if (plan.training) j["training"] = training_to_json(*plan.training);
  return j;
}

namespace {

bool is_scalar_array(const ordered_json& j) {
  if (!j.is_array() || j.empty()) return false;
  for (const auto& item : j) {
    if (item.is_structured()) return false;
  }
  return true;
}

void write_string(const std::string& text, std::string& out) {
  // Plan text is names and messages: escape-free in practice, so check before paying for it.
  for (unsigned char c : text) {
    if (c < 0x20 || c == '"' || c == '\\' || c >= 0x80) {
      out += ordered_json(text).dump();
      return;
    }
  }
  out += '"';
  out += text;
  out += '"';
}

void write_scalar(const ordered_json& j, std::string& out) {
  if (j.is_string()) {
    write_string(j.get_ref<const std::string&>(), out);
  } else if (j.is_number_integer()) {
    out += std::to_string(j.get<int64_t>());
  } else {
    out += j.dump();
  }
}

// Like dump(2), except that arrays of scalars (shapes, unit lists) stay on one line: a plan
// then reads like a table in review, and a changed shape is a one-line diff.
void write_readable(const ordered_json& j, int indent, std::string& out) {
  if (j.is_object() && !j.empty()) {
    out += "{\n";
    size_t i = 0;
    for (auto it = j.begin(); it != j.end(); ++it, ++i) {
      out.append(indent + 2, ' ');
      write_string(it.key(), out);
      out += ": ";
      write_readable(it.value(), indent + 2, out);
      out += i + 1 < j.size() ? ",\n" : "\n";
    }
    out.append(indent, ' ');
    out += '}';
  } else if (j.is_array() && !j.empty() && !is_scalar_array(j)) {
    out += "[\n";
    for (size_t i = 0; i < j.size(); ++i) {
      out.append(indent + 2, ' ');
      write_readable(j[i], indent + 2, out);
      out += i + 1 < j.size() ? ",\n" : "\n";
    }
    out.append(indent, ' ');
    out += ']';
  } else if (is_scalar_array(j)) {
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += ", ";
      write_scalar(j[i], out);
    }
    out += ']';
  } else {
    write_scalar(j, out);
  }
}

}  // namespace

std::string dump_plan(const Plan& plan) {
  try {
    std::string out;
    write_readable(plan_to_json(plan), 0, out);
    return out + "\n";
  } catch (const nlohmann::json::type_error& e) {
    // The only type error dump raises: a name or path that is not UTF-8 (JSON text must be).
    fail(ExitCode::kUsage,
         std::string("cannot write the plan: a text field is not valid UTF-8 (") + e.what() + ")");
  }
}

}  // namespace mfsdp::schema
