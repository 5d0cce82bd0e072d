// parse_plan: the type and shape check of a plan document. It only descends into the
// structure plan schema v1 defines and never copies, dumps or compares an input value that
// could be an arbitrarily deep array or object, so junk input cannot exhaust the stack.
//
// Over 400 lines: one reader per section of plan schema v1, each short, that must agree
// with plan_json.cpp's writer field by field.

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

#include "schema/checked_int64.h"
#include "schema/error.h"
#include "schema/plan_check.h"
#include "schema/plan_json.h"
#include "schema/plan_rules.h"

namespace mfsdp::schema {
namespace {

using nlohmann::json;

std::string type_phrase(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a floating-point number";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "a non-JSON value";
  }
}

// Cuts input text that goes into a message to a readable length without splitting a
// UTF-8 sequence.
std::string shorten(const std::string& text, size_t limit = 64) {
  if (text.size() <= limit) return text;
  size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "...";
}

// Input text as a JSON string literal without its quotes: control characters escaped, so a
// message stays on one line.
std::string escaped(const std::string& text) {
  const std::string literal =
      json(shorten(text)).dump(-1, ' ', false, json::error_handler_t::replace);
  return literal.substr(1, literal.size() - 2);
}

bool is_identifier(const std::string& key) {
  if (key.empty() || key.size() > 64 || std::isdigit(static_cast<unsigned char>(key[0]))) {
    return false;
  }
  for (char c : key) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

std::string member_path(const std::string& path, const std::string& key) {
  if (!is_identifier(key)) return path + "[\"" + escaped(key) + "\"]";
  return path.empty() ? key : path + "." + key;
}

std::string index_path(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

class Reader;

// The fields of one JSON object, looked up by name; reports missing and unknown ones.
class Fields {
 public:
  Fields(Reader& reader, const json& value, std::string path);

  template <typename T, typename... Limits>
  void get(const char* key, T& out, Limits... limits);
  // A field that may be absent (absent: `out` stays empty).
  template <typename T>
  void get_optional(const char* key, std::optional<T>& out);
  // Reports the keys no get() asked for. Call after the last get().
  void finish();

 private:
  Reader& reader_;
  const json& value_;
  std::string path_;
  std::vector<std::string> known_;
};

class Reader {
 public:
  void problem(const std::string& path, const std::string& message) {
    problems_.push_back({path, message});
  }
  std::vector<Problem> take_problems() { return std::move(problems_); }

  void read(const json& value, const std::string& path, std::string& out) {
    if (!value.is_string()) return problem(path, "expected a string, got " + type_phrase(value));
    out = value.get<std::string>();
  }

  void read(const json& value, const std::string& path, std::optional<std::string>& out) {
    if (value.is_null()) {
      out.reset();
    } else if (value.is_string()) {
      out = value.get<std::string>();
    } else {
      problem(path, "expected a string or null, got " + type_phrase(value));
    }
  }

  void read(const json& value, const std::string& path, bool& out) {
    if (!value.is_boolean()) {
      return problem(path, "expected a boolean, got " + type_phrase(value));
    }
    out = value.get<bool>();
  }

  // Every integer of a plan is a count, size, index or offset, so none may be negative.
  void read(const json& value, const std::string& path, int64_t& out, int64_t minimum = 0,
            int64_t maximum = std::numeric_limits<int64_t>::max()) {
    static const std::string kOutOfRange = "integer out of range: must fit in 64 bits (signed)";
    if (value.is_number_unsigned()) {
      if (value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return problem(path, kOutOfRange);
      }
    } else if (value.is_number_float()) {
      const double number = value.get<double>();
      // Integers beyond 64 bits come out of the JSON parser as floating-point numbers.
      if (!std::isfinite(number) || (std::trunc(number) == number && std::fabs(number) >= 0x1p63)) {
        return problem(path, kOutOfRange);
      }
      return problem(path, "expected an integer, got the floating-point number " + value.dump());
    } else if (!value.is_number_integer()) {
      return problem(path, "expected an integer, got " + type_phrase(value));
    }
    const int64_t number = value.get<int64_t>();
    if (number < minimum) {
      return problem(path,
                     "must be >= " + std::to_string(minimum) + ", got " + std::to_string(number));
    }
    if (number > maximum) {
      return problem(path,
                     "must be <= " + std::to_string(maximum) + ", got " + std::to_string(number));
    }
    out = number;
  }

  // Measured times: any finite number >= 0.
  void read(const json& value, const std::string& path, double& out) {
    if (!value.is_number()) return problem(path, "expected a number, got " + type_phrase(value));
    const double number = value.get<double>();
    if (!std::isfinite(number) || number < 0) {
      return problem(path, "must be a finite number >= 0, got " + value.dump());
    }
    out = number;
  }

  template <typename T>
  void read(const json& value, const std::string& path, std::vector<T>& out) {
    if (!value.is_array()) return problem(path, "expected an array, got " + type_phrase(value));
    out.clear();
    out.reserve(value.size());
    for (size_t i = 0; i < value.size(); ++i) {
      T item{};
      read(value[i], index_path(path, i), item);
      out.push_back(std::move(item));
    }
  }

  void read(const json& value, const std::string& path, ModelInfo& out) {
    Fields fields(*this, value, path);
    fields.get("path", out.path);
    fields.get("sha256", out.sha256);
    fields.get("structural_hash", out.structural_hash);
    fields.get("modules", out.modules);
    fields.get("parameters", out.parameters);
    fields.get("parameter_numel", out.parameter_numel);
    fields.finish();
  }

  void read(const json& value, const std::string& path, Mesh& out) {
    Fields fields(*this, value, path);
    // Ranks are 32-bit ints in Gloo and NCCL.
    fields.get("world_size", out.world_size, int64_t{1}, kMaxWorldSize);
    fields.get("shard_size", out.shard_size, int64_t{1}, kMaxWorldSize);
    fields.get("replicate_size", out.replicate_size, int64_t{1}, kMaxWorldSize);
    fields.finish();
  }

  void read(const json& value, const std::string& path, Policy& out) {
    Fields fields(*this, value, path);
    fields.get("param_dtype", out.param_dtype);
    fields.get("reduce_dtype", out.reduce_dtype);
    fields.get("reshard_after_forward", out.reshard_after_forward);
    fields.get("forward_prefetch", out.forward_prefetch);
    fields.get("backward_prefetch", out.backward_prefetch);
    fields.get("resident_budget_bytes", out.resident_budget_bytes);
    fields.get("unified_stream", out.unified_stream);
    fields.get("align_bytes", out.align_bytes, int64_t{1}, kMaxAlignBytes);
    fields.finish();
  }

  void read(const json& value, const std::string& path, Stream& out) {
    Fields fields(*this, value, path);
    fields.get("name", out.name);
    fields.get("collectives", out.collectives);
    fields.finish();
  }

  void read(const json& value, const std::string& path, ParamLayout& out) {
    Fields fields(*this, value, path);
    fields.get("name", out.name);
    fields.get("shape", out.shape);
    fields.get("numel", out.numel);
    fields.get("offset", out.offset);
    fields.get("aliases", out.aliases);
    fields.finish();
  }

  void read(const json& value, const std::string& path, Group& out) {
    Fields fields(*this, value, path);
    fields.get("dtype", out.dtype);
    fields.get("requires_grad", out.requires_grad);
    fields.get("numel", out.numel);
    fields.get("padded_numel", out.padded_numel);
    fields.get("shard_numel", out.shard_numel);
    fields.get("params", out.params);
    fields.finish();
  }

  void read(const json& value, const std::string& path, BufferInfo& out) {
    Fields fields(*this, value, path);
    fields.get("name", out.name);
    fields.get("shape", out.shape);
    fields.get("dtype", out.dtype);
    fields.finish();
  }

  void read(const json& value, const std::string& path, Unit& out) {
    Fields fields(*this, value, path);
    fields.get("name", out.name);
    fields.get("type", out.type);
    std::optional<std::vector<std::string>> modules;
    fields.get_optional("modules", modules);
    out.modules = modules.value_or(std::vector<std::string>{});
    fields.get("parent", out.parent);
    fields.get("root", out.root);
    fields.get("call_count", out.call_count);
    fields.get("conditional", out.conditional);
    fields.get("repeated", out.repeated);
    fields.get("kept_after_forward", out.kept_after_forward);
    std::optional<bool> checkpoint;
    fields.get_optional("checkpoint", checkpoint);
    out.checkpoint = checkpoint.value_or(false);
    fields.get("unsharded_bytes", out.unsharded_bytes);
    fields.get("sharded_bytes", out.sharded_bytes);
    fields.get("groups", out.groups);
    fields.get("buffers", out.buffers);
    fields.finish();
  }

  void read(const json& value, const std::string& path, ScheduleEntry& out) {
    Fields fields(*this, value, path);
    fields.get("phase", out.phase);
    fields.get("point", out.point);
    fields.get("unit", out.unit);
    fields.get("call", out.call);
    fields.get("all_gather", out.all_gather);
    fields.get("wait", out.wait);
    fields.get("reshard", out.reshard);
    fields.get("reduce_scatter", out.reduce_scatter);
    fields.get("unsharded_bytes", out.unsharded_bytes);
    fields.finish();
  }

  void read(const json& value, const std::string& path, Slot& out) {
    Fields fields(*this, value, path);
    fields.get("index", out.index);
    fields.get("bytes", out.bytes);
    fields.get("units", out.units);
    fields.finish();
  }

  void read(const json& value, const std::string& path, UnitActivations& out) {
    Fields fields(*this, value, path);
    fields.get("unit", out.unit);
    fields.get("saved_bytes", out.saved_bytes, std::numeric_limits<int64_t>::min());
    fields.finish();
  }

  void read(const json& value, const std::string& path, Activations& out) {
    Fields fields(*this, value, path);
    fields.get("microbatch", out.microbatch, int64_t{1});
    fields.get("peak_bytes", out.peak_bytes);
    fields.get("peak_at", out.peak_at);
    fields.get("output_bytes", out.output_bytes);
    fields.get("loss", out.loss);
    fields.get("combined_peak_bytes", out.combined_peak_bytes);
    fields.get("units", out.units);
    fields.finish();
  }

  void read(const json& value, const std::string& path, Memory& out) {
    Fields fields(*this, value, path);
    fields.get("sharded_param_bytes", out.sharded_param_bytes);
    fields.get("sharded_grad_bytes", out.sharded_grad_bytes);
    fields.get("peak_unsharded_bytes", out.peak_unsharded_bytes);
    fields.get("peak_at", out.peak_at);
    fields.get("slot_bytes", out.slot_bytes);
    fields.get("slots", out.slots);
    fields.get_optional("activations", out.activations);
    fields.finish();
  }

  void read(const json& value, const std::string& path, Communication& out) {
    Fields fields(*this, value, path);
    fields.get("all_gather_count", out.all_gather_count);
    fields.get("all_gather_bytes", out.all_gather_bytes);
    fields.get("reduce_scatter_count", out.reduce_scatter_count);
    fields.get("reduce_scatter_bytes", out.reduce_scatter_bytes);
    fields.get("all_reduce_bytes", out.all_reduce_bytes);
    fields.finish();
  }

  void read(const json& value, const std::string& path, Diagnostic& out) {
    Fields fields(*this, value, path);
    fields.get("severity", out.severity);
    fields.get("code", out.code);
    fields.get("message", out.message);
    fields.get("where", out.where);
    fields.finish();
  }

  void read(const json& value, const std::string& path, UnitTime& out) {
    Fields fields(*this, value, path);
    fields.get("unit", out.unit);
    fields.get("forward_ms", out.forward_ms);
    fields.get("backward_ms", out.backward_ms);
    fields.get_optional("pre_forward_ms", out.pre_forward_ms);
    fields.get_optional("post_forward_ms", out.post_forward_ms);
    fields.finish();
  }

  void read(const json& value, const std::string& path, ClassWork& out) {
    Fields fields(*this, value, path);
    fields.get("flops", out.flops);
    fields.get("bytes", out.bytes);
    fields.get("ops", out.ops);
    fields.finish();
  }

  void read(const json& value, const std::string& path, Work& out) {
    Fields fields(*this, value, path);
    fields.get("matmul", out.matmul);
    fields.get("attention", out.attention);
    fields.get("elementwise", out.elementwise);
    fields.get("embedding", out.embedding);
    fields.finish();
  }

  void read(const json& value, const std::string& path, UnitWork& out) {
    Fields fields(*this, value, path);
    fields.get("unit", out.unit);
    fields.get("pre_forward", out.pre_forward);
    fields.get("post_forward", out.post_forward);
    fields.get("backward", out.backward);
    fields.finish();
  }

  void read(const json& value, const std::string& path, Trace& out) {
    Fields fields(*this, value, path);
    fields.get("inputs", out.inputs);
    fields.get("differs_from_static", out.differs_from_static);
    fields.get("times", out.times);
    fields.get_optional("loss_ms", out.loss_ms);
    fields.get_optional("timed_steps", out.timed_steps);
    fields.get_optional("threads", out.threads);
    fields.get_optional("calibration_gflops", out.calibration_gflops);
    fields.get_optional("device", out.device);
    fields.get_optional("attention", out.attention);
    std::optional<std::vector<UnitWork>> work;
    fields.get_optional("work", work);
    if (work) out.work = std::move(*work);
    fields.get_optional("loss_work", out.loss_work);
    fields.finish();
  }

  void read(const json& value, const std::string& path, StepPrediction& out) {
    Fields fields(*this, value, path);
    fields.get("profile", out.profile);
    fields.get("microbatches", out.microbatches);
    fields.get("microbatch_samples", out.microbatch_samples);
    fields.get("optimizer", out.optimizer);
    fields.get("compute_scale", out.compute_scale);
    fields.get("step_ms", out.step_ms);
    fields.get("compute_ms", out.compute_ms);
    fields.get("exposed_comm_ms", out.exposed_comm_ms);
    fields.get("contention_ms", out.contention_ms);
    fields.get_optional("memory_bytes", out.memory_bytes);
    fields.finish();
  }

  void read(const json& value, const std::string& path, Training& out) {
    Fields fields(*this, value, path);
    fields.get_optional("steps", out.steps);
    fields.get_optional("global_batch", out.global_batch);
    fields.get_optional("microbatches", out.microbatches);
    fields.get_optional("optimizer", out.optimizer);
    fields.get_optional("lr", out.lr);
    fields.get_optional("weight_decay", out.weight_decay);
    fields.get_optional("betas", out.betas);
    fields.get_optional("momentum", out.momentum);
    fields.get_optional("warmup", out.warmup);
    fields.get_optional("lr_schedule", out.lr_schedule);
    fields.get_optional("clip_grad_norm", out.clip_grad_norm);
    fields.get_optional("loss", out.loss);
    fields.get_optional("seed", out.seed);
    fields.finish();
  }

  void read(const json& value, const std::string& path, Plan& out) {
    Fields fields(*this, value, path);
    fields.get("schema", out.schema);
    fields.get("generator", out.generator);
    fields.get("model", out.model);
    fields.get("mesh", out.mesh);
    fields.get("policy", out.policy);
    fields.get("streams", out.streams);
    fields.get("units", out.units);
    fields.get("roots", out.roots);
    fields.get("forward_order", out.forward_order);
    fields.get("backward_order", out.backward_order);
    fields.get("schedule", out.schedule);
    fields.get("memory", out.memory);
    fields.get("communication", out.communication);
    fields.get("diagnostics", out.diagnostics);
    fields.get_optional("trace", out.trace);
    fields.get_optional("prediction", out.prediction);
    fields.get_optional("training", out.training);
    fields.finish();
  }

 private:
  std::vector<Problem> problems_;
};

Fields::Fields(Reader& reader, const json& value, std::string path)
    : reader_(reader), value_(value), path_(std::move(path)) {
  if (!value_.is_object()) reader_.problem(path_, "expected an object, got " + type_phrase(value_));
}

template <typename T, typename... Limits>
void Fields::get(const char* key, T& out, Limits... limits) {
  known_.emplace_back(key);
  if (!value_.is_object()) return;
  const auto it = value_.find(key);
  if (it == value_.end()) return reader_.problem(member_path(path_, key), "missing field");
  reader_.read(*it, member_path(path_, key), out, limits...);
}

template <typename T>
void Fields::get_optional(const char* key, std::optional<T>& out) {
  known_.emplace_back(key);
  if (!value_.is_object()) return;
  const auto it = value_.find(key);
  if (it == value_.end()) return out.reset();
  reader_.read(*it, member_path(path_, key), out.emplace());
}

void Fields::finish() {
  if (!value_.is_object()) return;
  for (auto it = value_.begin(); it != value_.end(); ++it) {
    if (std::find(known_.begin(), known_.end(), it.key()) == known_.end()) {
      reader_.problem(member_path(path_, it.key()), "unknown field");
    }
  }
}

// Readers add up a plan's sizes (mfsdp diff's totals, the bytes of the parameters that move
// between units), so those sums must fit in 64 bits as well as each size.
void check_sums(const Plan& plan, Reader& reader) {
  const std::string too_large = " adds up to more than " +
                                std::to_string(std::numeric_limits<int64_t>::max()) +
                                " bytes, the most a plan can hold";
  if (!per_rank_bytes(plan.memory)) {
    const std::string sum = "sharded_param_bytes + sharded_grad_bytes + slot_bytes";
    reader.problem("memory", "the memory per rank (" + sum + ")" + too_large);
  }
  if (!communication_bytes(plan.communication)) {
    reader.problem("communication",
                   "all_gather_bytes + reduce_scatter_bytes + all_reduce_bytes" + too_large);
  }
  const std::vector<std::string>& dtypes = dtype_names();
  std::optional<int64_t> bytes = 0;
  for (size_t u = 0; u < plan.units.size() && bytes; ++u) {
    const std::vector<Group>& groups = plan.units[u].groups;
    for (size_t g = 0; g < groups.size() && bytes; ++g) {
      const bool known = std::find(dtypes.begin(), dtypes.end(), groups[g].dtype) != dtypes.end();
      const int64_t size = known ? dtype_size(groups[g].dtype) : 1;
      for (size_t p = 0; p < groups[g].params.size() && bytes; ++p) {
        const std::optional<int64_t> param = checked_mul(groups[g].params[p].numel, size);
        bytes = param ? checked_add(*bytes, *param) : std::nullopt;
        if (!bytes) {
          const std::string path = "units[" + std::to_string(u) + "].groups[" + std::to_string(g) +
                                   "].params[" + std::to_string(p) + "]";
          reader.problem(path + ".numel",
                         "with this parameter, the bytes of the plan's parameters" + too_large);
        }
      }
    }
  }
}

// Names a `schema` value that is not the supported version, without dumping a deep value.
std::string schema_phrase(const json& value) {
  if (value.is_string()) return "'" + escaped(value.get<std::string>()) + "'";
  if (value.is_array() || value.is_object()) return "(" + type_phrase(value) + ")";
  return value.dump();
}

}  // namespace

ParseResult parse_plan(const json& doc) {
  const std::string supported = std::string("this mfsdp reads: ") + kPlanSchemaVersion;
  if (!doc.is_object()) {
    fail(ExitCode::kUsage,
         "not an mfsdp plan: expected a JSON object, got " + type_phrase(doc) + "; " + supported);
  }
  const auto schema = doc.find("schema");
  if (schema == doc.end()) {
    fail(ExitCode::kUsage, "not an mfsdp plan: it has no \"schema\" field; " + supported);
  }
  if (!schema->is_string() || schema->get<std::string>() != kPlanSchemaVersion) {
    fail(ExitCode::kUsage, "unsupported plan schema " + schema_phrase(*schema) + "; " + supported);
  }
  Reader reader;
  ParseResult result;
  reader.read(doc, "", result.plan);
  result.problems = reader.take_problems();
  if (result.problems.empty()) {
    Reader sums;
    check_sums(result.plan, sums);
    result.problems = sums.take_problems();
  }
  return result;
}

TrainingParse parse_training(const json& doc, const std::string& path) {
  Reader reader;
  TrainingParse result;
  reader.read(doc, path, result.training);
  result.problems = reader.take_problems();
  return result;
}

Training training_from_json(const json& doc, const std::string& source, const std::string& path) {
  TrainingParse parsed = parse_training(doc, path);
  if (parsed.problems.empty()) {
    for (Problem& p : check_training(parsed.training)) {
      if (p.path.rfind("training.", 0) == 0) {
        p.path = path.empty() ? p.path.substr(9) : path + p.path.substr(8);
      }
      parsed.problems.push_back(std::move(p));
    }
  }
  if (!parsed.problems.empty()) {
    fail(ExitCode::kUsage, source + ": " + parsed.problems.front().str() +
                               " (training keys: docs/plan-format.md#training)");
  }
  return parsed.training;
}

}  // namespace mfsdp::schema
