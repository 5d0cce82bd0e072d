#include "schema/plan_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "schema/check_context.h"
#include "schema/optimizer.h"
#include "schema/plan_rules.h"

namespace mfsdp::schema {
namespace check {

std::string to_string(Wide value) {
  if (value < 0) return "-" + to_string(-value);
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  } while (value > 0);
  return digits;
}

std::string quote(const std::string& name) {
  const std::string literal =
      nlohmann::json(name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return "'" + literal.substr(1, literal.size() - 2) + "'";
}

std::string quote_list(const std::vector<std::string>& names) {
  std::string text = "[";
  for (size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : ", ") + quote(names[i]);
  return text + "]";
}

std::string at(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

Context::Context(const Plan& plan) : plan(plan) {
  const std::vector<std::string>& dtypes = dtype_names();
  for (const Unit& unit : plan.units) {
    units_.emplace(unit.name, &unit);
    for (const std::string& path : unit_modules(unit)) unit_at_.emplace(path, &unit);
    for (const Group& group : unit.groups) {
      if (std::find(dtypes.begin(), dtypes.end(), group.dtype) == dtypes.end()) {
        group_dtypes_known_ = false;
      }
    }
  }
}

const Unit* Context::unit(const std::string& name) const {
  const auto it = units_.find(name);
  return it == units_.end() ? nullptr : it->second;
}

const Unit* Context::unit_at(const std::string& path) const {
  const auto it = unit_at_.find(path);
  return it == unit_at_.end() ? nullptr : it->second;
}

namespace {

std::optional<int64_t> known_size(const std::string& dtype) {
  const std::vector<std::string>& names = dtype_names();
  if (std::find(names.begin(), names.end(), dtype) == names.end()) return std::nullopt;
  return dtype_size(dtype);
}

bool is_power_of_two(int64_t value) {
  return value >= 1 && (value & (value - 1)) == 0;
}

}  // namespace

std::optional<int64_t> Context::storage_size(const Group& group) const {
  return known_size(group.dtype);
}

std::optional<int64_t> Context::compute_size(const Group& group) const {
  if (!known_size(group.dtype)) return std::nullopt;
  // A param_dtype that is not a floating dtype was reported by check_header; using it here
  // would only repeat that problem as layout noise.
  if (plan.policy.param_dtype && is_floating_dtype(group.dtype) &&
      !is_floating_dtype(*plan.policy.param_dtype)) {
    return std::nullopt;
  }
  return known_size(schema::compute_dtype(plan.policy, group.dtype));
}

std::optional<int64_t> Context::reduce_size() const {
  if (!is_floating_dtype(plan.policy.reduce_dtype)) return std::nullopt;
  return dtype_size(plan.policy.reduce_dtype);
}

std::optional<int64_t> Context::main_grad_size() const {
  if (!is_floating_dtype(plan.policy.reduce_dtype)) return std::nullopt;
  return dtype_size(main_grad_dtype(plan.policy));
}

std::optional<int64_t> Context::align_elems(const Group& group) const {
  if (!is_power_of_two(plan.policy.align_bytes) || !compute_size(group)) return std::nullopt;
  return schema::align_elems(plan.policy, group.dtype);
}

namespace {

std::string describe_streams(const std::vector<Stream>& streams) {
  std::string text;
  for (const Stream& stream : streams) {
    text += (text.empty() ? "" : ", ") + quote(stream.name) + " " + quote_list(stream.collectives);
  }
  return "[" + text + "]";
}

}  // namespace

void check_header(Context& context) {
  const Plan& plan = context.plan;
  if (plan.schema != kPlanSchemaVersion) {
    context.report("schema",
                   "is " + quote(plan.schema) + ", expected " + quote(kPlanSchemaVersion));
  }

  for (const Problem& p : check_mesh(plan.mesh)) context.report(p.path, p.message);
  const Policy& policy = plan.policy;
  for (const Problem& p : check_policy(policy)) context.report(p.path, p.message);

  const std::vector<Stream> expected = expected_streams(policy);
  const bool same = plan.streams.size() == expected.size() &&
                    std::equal(expected.begin(), expected.end(), plan.streams.begin(),
                               [](const Stream& a, const Stream& b) {
                                 return a.name == b.name && a.collectives == b.collectives;
                               });
  if (!same) {
    context.report("streams", "are " + describe_streams(plan.streams) + ", expected " +
                                  describe_streams(expected) + " for policy.unified_stream " +
                                  (policy.unified_stream ? "true" : "false"));
  }
}

void check_orders(Context& context) {
  const Plan& plan = context.plan;
  const auto check_order = [&](const std::string& path, const std::vector<std::string>& order) {
    std::map<std::string, size_t> listed;
    for (size_t k = 0; k < order.size(); ++k) {
      const Unit* unit = context.unit(order[k]);
      if (unit == nullptr) {
        context.report(at(path, k), quote(order[k]) + " is not a unit");
      } else if (unit->call_count <= 0) {
        context.report(at(path, k), quote(order[k]) + " is never called (call_count " +
                                        std::to_string(unit->call_count) + ")");
      } else if (const auto [it, fresh] = listed.emplace(order[k], k); !fresh) {
        context.report(at(path, k),
                       quote(order[k]) + " is listed twice (also " + at(path, it->second) + ")");
      }
    }
    for (const Unit& unit : plan.units) {
      if (unit.call_count > 0 && context.unit(unit.name) == &unit && !listed.count(unit.name)) {
        context.report(path, "misses " + quote(unit.name) + ", which is called " +
                                 std::to_string(unit.call_count) + " time(s)");
      }
    }
  };
  check_order("forward_order", plan.forward_order);
  check_order("backward_order", plan.backward_order);
}

void check_diagnostics(Context& context) {
  const std::vector<Diagnostic>& diagnostics = context.plan.diagnostics;
  for (size_t i = 0; i < diagnostics.size(); ++i) {
    const std::string path = at("diagnostics", i);
    const std::string& severity = diagnostics[i].severity;
    if (severity != "info" && severity != "warning" && severity != "error") {
      context.report(path + ".severity",
                     "is " + quote(severity) + ", expected 'info', 'warning' or 'error'");
    }
    if (diagnostics[i].code.empty()) context.report(path + ".code", "is empty");
  }
}

namespace {

// The times that predict a step: finite and >= 0, the forward split given for every unit or
// for none, a calibration above 0 and at least one timed step.
void check_trace_timing(Context& context, const Trace& trace) {
  const auto time = [&](const std::string& path, double ms) {
    if (!(ms >= 0) || !std::isfinite(ms)) context.report(path, "must be a finite number >= 0");
  };
  size_t split = 0;
  for (size_t i = 0; i < trace.times.size(); ++i) {
    const UnitTime& t = trace.times[i];
    time(at("trace.times", i) + ".forward_ms", t.forward_ms);
    time(at("trace.times", i) + ".backward_ms", t.backward_ms);
    if (t.pre_forward_ms.has_value() != t.post_forward_ms.has_value()) {
      context.report(at("trace.times", i),
                     "has one of pre_forward_ms and post_forward_ms; give both");
    }
    if (t.pre_forward_ms) time(at("trace.times", i) + ".pre_forward_ms", *t.pre_forward_ms);
    if (t.post_forward_ms) time(at("trace.times", i) + ".post_forward_ms", *t.post_forward_ms);
    if (t.pre_forward_ms) ++split;
  }
  if (split != 0 && split != trace.times.size()) {
    context.report("trace.times", "splits forward for " + std::to_string(split) + " of " +
                                      std::to_string(trace.times.size()) +
                                      " units; pre_forward_ms and post_forward_ms are for every "
                                      "unit or none");
  }
  if (trace.loss_ms) time("trace.loss_ms", *trace.loss_ms);
  if (trace.timed_steps && *trace.timed_steps < 1) {
    context.report("trace.timed_steps", "must be at least 1");
  }
  if (trace.threads && *trace.threads < 1) context.report("trace.threads", "must be at least 1");
  if (trace.calibration_gflops &&
      (!(*trace.calibration_gflops > 0) || !std::isfinite(*trace.calibration_gflops))) {
    context.report("trace.calibration_gflops", "must be a finite number > 0");
  }
}

std::string three_decimals(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.3f", value);
  return text;
}

// The prediction section: finite times >= 0 that add up, a known optimizer, and a trace to
// have predicted from (a CPU trace's times, or a shape-only trace's work at a profile's rates).
void check_prediction(Context& context) {
  if (!context.plan.prediction) return;
  const StepPrediction& p = *context.plan.prediction;
  if (!context.plan.trace) {
    context.report("prediction",
                   "is present without a trace; a step is predicted from the "
                   "unit times or work a trace records");
  }
  if (p.profile.empty()) context.report("prediction.profile", "is empty");
  if (p.microbatches < 1) context.report("prediction.microbatches", "must be at least 1");
  if (p.microbatch_samples < 1) {
    context.report("prediction.microbatch_samples", "must be at least 1");
  }
  if (!find_optimizer(p.optimizer)) {
    context.report("prediction.optimizer",
                   "is " + quote(p.optimizer) + ", expected " + quote_list(optimizer_names()));
  }
  bool finite = true;
  for (const auto& [name, ms] : {std::pair<const char*, double>{"compute_scale", p.compute_scale},
                                 {"step_ms", p.step_ms},
                                 {"compute_ms", p.compute_ms},
                                 {"exposed_comm_ms", p.exposed_comm_ms},
                                 {"contention_ms", p.contention_ms}}) {
    if (!(ms >= 0) || !std::isfinite(ms)) {
      context.report(std::string("prediction.") + name, "must be a finite number >= 0");
      finite = false;
    }
  }
  // Each is rounded to 0.001 ms.
  if (finite &&
      std::abs(p.step_ms - (p.compute_ms + p.exposed_comm_ms + p.contention_ms)) > 0.005) {
    context.report("prediction.step_ms",
                   "is not compute_ms + exposed_comm_ms + contention_ms (" +
                       three_decimals(p.compute_ms + p.exposed_comm_ms + p.contention_ms) + " ms)");
  }
}

// `items` (a trace's times or work) name the units of forward_order, in that order, each once.
template <typename Item>
void covers_forward_order(Context& context, const std::vector<Item>& items, const std::string& list,
                          const std::string& what) {
  const std::vector<std::string>& order = context.plan.forward_order;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string& unit = items[i].unit;
    const std::string path = at(list, i) + ".unit";
    if (i >= order.size()) {
      context.report(path, quote(unit) + " is beyond forward_order, which has " +
                               std::to_string(order.size()) + " unit(s)");
    } else if (unit != order[i]) {
      context.report(path, "is " + quote(unit) + ", expected " + quote(order[i]) + ": " + what +
                               " list the units of forward_order, in that order");
    }
  }
  if (items.size() < order.size()) {
    context.report(
        list, "misses " + quote(order[items.size()]) + " and every later unit of forward_order");
  }
}

// One stretch's work: counts >= 0, and no FLOPs or bytes without an operator that did them.
void check_work(Context& context, const Work& work, const std::string& path) {
  for (const auto& [name, c] : {std::pair<const char*, const ClassWork*>{"matmul", &work.matmul},
                                {"attention", &work.attention},
                                {"elementwise", &work.elementwise},
                                {"embedding", &work.embedding}}) {
    const std::string at_class = path + "." + name;
    if (c->flops < 0 || c->bytes < 0 || c->ops < 0) {
      context.report(at_class, "has a negative count");
    } else if (c->ops == 0 && (c->flops > 0 || c->bytes > 0)) {
      context.report(at_class + ".ops", "is 0 beside FLOPs or bytes: some operator did them");
    }
  }
}

// The trace section: its times cover forward_order exactly, in order, and it names only the
// fields a trace can change.
void check_trace(Context& context) {
  if (!context.plan.trace) return;
  const Trace& trace = *context.plan.trace;
  if (trace.inputs.empty()) {
    context.report("trace.inputs", "is empty; a trace runs on at least one --trace-input");
  }
  for (size_t i = 0; i < trace.inputs.size(); ++i) {
    if (trace.inputs[i].empty()) context.report(at("trace.inputs", i), "is empty");
  }
  static const std::vector<std::string> kTraceable = {"units.call_count", "forward_order",
                                                      "backward_order"};
  size_t next = 0;  // index into kTraceable: items must come in its order, once each
  for (size_t i = 0; i < trace.differs_from_static.size(); ++i) {
    const std::string& field = trace.differs_from_static[i];
    const auto it = std::find(kTraceable.begin(), kTraceable.end(), field);
    const size_t rank = static_cast<size_t>(it - kTraceable.begin());
    if (it == kTraceable.end()) {
      context.report(at("trace.differs_from_static", i),
                     "is " + quote(field) + ", expected " + quote_list(kTraceable));
    } else if (rank < next) {
      context.report(at("trace.differs_from_static", i),
                     quote(field) + " is repeated or out of order; expected the order " +
                         quote_list(kTraceable));
    } else {
      next = rank + 1;
    }
  }
  const bool meta = trace.device.has_value();
  if (meta && *trace.device != "meta") {
    context.report("trace.device", "is " + quote(*trace.device) +
                                       ", expected 'meta' (a CPU trace has no device field)");
  }
  if (trace.attention && *trace.attention != "fused") {
    context.report("trace.attention", "is " + quote(*trace.attention) +
                                          ", expected 'fused' (attention as traced has no "
                                          "attention field)");
  }
  if (trace.attention && !meta) {
    context.report("trace.attention",
                   "is present in a CPU trace; only a shape-only trace (device 'meta') models "
                   "a fused attention kernel");
  }
  if (meta) {
    if (!trace.times.empty()) {
      context.report("trace.times",
                     "is not empty in a shape-only trace (device 'meta'), "
                     "which times nothing");
    }
    for (const auto& [name, present] :
         {std::pair<const char*, bool>{"loss_ms", trace.loss_ms.has_value()},
          {"timed_steps", trace.timed_steps.has_value()},
          {"calibration_gflops", trace.calibration_gflops.has_value()}}) {
      if (present) {
        context.report(std::string("trace.") + name,
                       "is present in a shape-only trace (device 'meta'), which times nothing");
      }
    }
    if (!trace.loss_work) context.report("trace.loss_work", "is missing in a shape-only trace");
    if (trace.loss_work) check_work(context, *trace.loss_work, "trace.loss_work");
    covers_forward_order(context, trace.work, "trace.work", "work");
    for (size_t i = 0; i < trace.work.size(); ++i) {
      const UnitWork& w = trace.work[i];
      const std::string path = at("trace.work", i);
      check_work(context, w.pre_forward, path + ".pre_forward");
      check_work(context, w.post_forward, path + ".post_forward");
      check_work(context, w.backward, path + ".backward");
    }
  } else {
    if (!trace.work.empty() || trace.loss_work) {
      context.report(trace.work.empty() ? "trace.loss_work" : "trace.work",
                     "is present in a CPU trace; only a shape-only trace (device 'meta') "
                     "counts work");
    }
    covers_forward_order(context, trace.times, "trace.times", "times");
  }
  check_trace_timing(context, trace);
}

}  // namespace

}  // namespace check

std::vector<Problem> check_training(const Training& t) {
  std::vector<Problem> problems;
  const auto report = [&](const std::string& key, const std::string& message) {
    problems.push_back({"training." + key, message});
  };
  const auto positive = [&](const char* key, const std::optional<int64_t>& value) {
    if (value && *value < 1) report(key, "must be at least 1, got " + std::to_string(*value));
  };
  positive("steps", t.steps);
  positive("global_batch", t.global_batch);
  positive("microbatches", t.microbatches);
  const auto one_of = [&](const char* key, const std::optional<std::string>& value,
                          const std::vector<std::string>& names) {
    if (value && std::find(names.begin(), names.end(), *value) == names.end()) {
      report(key, "is " + check::quote(*value) + "; expected one of " + check::quote_list(names));
    }
  };
  one_of("optimizer", t.optimizer, optimizer_names());
  one_of("lr_schedule", t.lr_schedule, {"constant", "cosine"});
  one_of("loss", t.loss, {"cross_entropy", "mse", "model"});
  if (t.lr && !(*t.lr > 0)) report("lr", "must be above 0");
  if (t.betas) {
    if (t.betas->size() != 2) {
      report("betas", "must hold two numbers, got " + std::to_string(t.betas->size()));
    } else if ((*t.betas)[0] >= 1 || (*t.betas)[1] >= 1) {
      report("betas", "must both be below 1");
    }
  }
  if (t.momentum && *t.momentum >= 1) report("momentum", "must be below 1");
  if (t.clip_grad_norm && !(*t.clip_grad_norm > 0)) report("clip_grad_norm", "must be above 0");
  return problems;
}

std::vector<Problem> check_plan(const Plan& plan) {
  check::Context context(plan);
  check::check_header(context);
  check::check_units(context);
  check::check_layout(context);
  check::check_orders(context);
  const check::Lifetimes lifetimes = check::check_schedule(context);
  check::check_memory(context, lifetimes);
  check::check_communication(context);
  check::check_diagnostics(context);
  check::check_trace(context);
  check::check_prediction(context);
  std::vector<Problem> problems = context.take_problems();
  if (plan.training) {
    for (Problem& p : check_training(*plan.training)) problems.push_back(std::move(p));
  }
  return problems;
}

}  // namespace mfsdp::schema
