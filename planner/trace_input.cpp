// `--trace-input`: one traced step of the model per set of units, with the units' times,
// saved activations and output bytes measured through the instrumentation. Over 400 lines
// until issue 39's torchscript/ library takes the "run one step of a model" part (inputs,
// loss, tensor walking, interpreter errors) that the trainer shares.
#include "planner/trace_input.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include "planner/torchscript/autograd_node.h"
#include "planner/torchscript/fused_attention.h"
#include "planner/torchscript/host_memory.h"
#include "planner/torchscript/instrumentation.h"
#include "planner/torchscript/mapped_archive.h"
#include "planner/torchscript/meta_kernels.h"
#include "planner/torchscript/op_work.h"
#include "planner/torchscript/reference_compute.h"
#include "planner/torchscript/torch_model.h"
#include "planner/torchscript/unit_hooks.h"
#include "schema/error.h"
#include "schema/plan.h"

namespace mfsdp::planner {
namespace {

using Clock = std::chrono::steady_clock;

std::string joined(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

double milliseconds(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// Gradients as the executor holds them. Each registration of a parameter (a tied weight has
// several) is its own autograd node that keeps the gradient it receives, until the
// reduce-scatter the executor would hand it to is done. Left to itself autograd would sum a
// tied weight's gradients before handing them over, holding the first through the whole
// backward (154 MiB at GPT-2 small), which the executor never does.
class KeptGradients {
 public:
  void keep(at::Tensor gradient) {
    std::lock_guard<std::mutex> lock(mutex_);
    kept_.push_back(std::move(gradient));
  }
  // A unit's backward begins: the unit before last's gradients go. The last one's stay, as
  // the executor's reduce-scatter holds them beside this backward (and recompute).
  void age() {
    std::vector<at::Tensor> freed;
    std::lock_guard<std::mutex> lock(mutex_);
    freed.swap(reducing_);
    reducing_.swap(kept_);
  }

 private:
  std::mutex mutex_;
  std::vector<at::Tensor> kept_;      // delivered since the last pre_backward
  std::vector<at::Tensor> reducing_;  // the unit before's, "in the reduce-scatter"
};

std::atomic<KeptGradients*> kept_gradients{nullptr};  // the trace running now, if any

// One registration's node. Its sequence number is the highest, like the executor's parameter
// nodes: the engine runs it as soon as a gradient reaches it, not after every later node.
class RegistrationNode : public torch::autograd::Node {
 public:
  RegistrationNode() : Node(std::numeric_limits<uint64_t>::max()) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&& gradients) override {
    KeptGradients* kept = kept_gradients.load();
    if (kept != nullptr && gradients[0].defined()) kept->keep(std::move(gradients[0]));
    return {};
  }
};

// From now on every parameter attribute of every module holds a tensor of its own, the output
// of its own RegistrationNode: over the parameter's storage, or for a floating parameter under
// a `param_dtype` a copy in it (made before the step, so not an activation), as gathered.
void register_parameters(torch::jit::Module& model, const std::optional<std::string>& param_dtype) {
  for (const auto& m : model.named_modules()) {
    const auto object = m.value._ivalue();
    for (const auto& p : m.value.named_parameters(/*recurse=*/false)) {
      if (!p.value.requires_grad()) continue;
      at::Tensor registration = p.value.detach();
      if (param_dtype && registration.is_floating_point()) {
        registration = registration.to(scalar_type_of(*param_dtype));
      }
      torch::autograd::create_gradient_edge(registration, make_node<RegistrationNode>());
      object->setSlot(object->type()->getAttributeSlot(p.name), registration);
    }
  }
}

// Records what the instrumented graphs report. Backward may run on autograd's threads.
class Tracer : public UnitHooks, public WorkSink {
 public:
  // `gradients`: what the parameters' registrations keep; each pre_backward frees them.
  // `param_dtype`: what the units compute in (input_dtype), or none.
  // `checkpointed`: per unit, whether it runs under activation checkpointing.
  Tracer(size_t units, KeptGradients& gradients, const std::optional<std::string>& param_dtype,
         std::vector<bool> checkpointed)
      : open_(units),
        gradients_(gradients),
        param_dtype_(param_dtype),
        checkpointed_(std::move(checkpointed)) {
    run_.forward_ms.assign(units, 0.0);
    run_.backward_ms.assign(units, 0.0);
    run_.pre_forward_ms.assign(units, 0.0);
    run_.post_forward_ms.assign(units, 0.0);
    run_.pre_forward_work.assign(units, {});
    run_.post_forward_work.assign(units, {});
    run_.backward_work.assign(units, {});
  }

  // Memory counts from here: call right before forward.
  void begin() {
    base_ = host_memory::tensor_bytes();
    host_memory::reset_peak();
    segment_start_ = Clock::now();
    phase_ = Phase::kForward;
  }

  void pre_forward(int unit) override {
    const Clock::time_point now = Clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    close_forward_segment(now, {true, unit});
    run_.forward.push_back({true, unit});
    boundary(run_.forward_bytes);
    open_[unit].push_back(Clock::now());
  }
  void post_forward(int unit) override {
    const Clock::time_point now = Clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    close_forward_segment(now, {false, unit});
    run_.forward.push_back({false, unit});
    boundary(run_.forward_bytes);
    if (open_[unit].empty()) return;  // the hooks nest; a stray exit only loses a time
    run_.forward_ms[unit] += milliseconds(now - open_[unit].back());
    open_[unit].pop_back();
  }
  // Forward returned; the loss follows.
  void end_forward() {
    const Clock::time_point now = Clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    close_forward_segment(now, {false, -1});
    phase_ = Phase::kLoss;
    loss_start_ = now;
    close_interval();
    run_.loss_bytes = {live(), live()};
    last_ = &run_.loss_bytes;
  }
  // A unit's backward cannot be seen to end, so its time runs until the next unit's begins.
  void pre_backward(int unit) override {
    const Clock::time_point now = Clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    if (run_.backward.empty()) run_.loss_ms = milliseconds(now - loss_start_);
    close_backward_segment(now);
    phase_ = Phase::kBackward;
    run_.backward.push_back(unit);
    free_gradients();
    boundary(run_.backward_bytes);
    segment_unit_ = unit;
    segment_start_ = now;
  }
  void end_backward() {
    const Clock::time_point now = Clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    close_backward_segment(now);
    close_interval();
    last_ = nullptr;
    phase_ = Phase::kDone;
  }

  // An operator's work goes where its time would: the segment it ran in.
  void add_work(OpClass c, OpWork work) override {
    std::lock_guard<std::mutex> lock(mutex_);
    switch (phase_) {
      case Phase::kForward:
        if (forward_segment_.unit < 0) {
          planner::add_work(before_first_, c, work);
        } else {
          planner::add_work(
              (forward_segment_.enter ? run_.pre_forward_work
                                      : run_.post_forward_work)[forward_segment_.unit],
              c, work);
        }
        break;
      case Phase::kBackward:
        if (segment_unit_ >= 0) {
          planner::add_work(run_.backward_work[segment_unit_], c, work);
          break;
        }
        [[fallthrough]];
      case Phase::kLoss:
        planner::add_work(run_.loss_work, c, work);
        break;
      case Phase::kBefore:
      case Phase::kDone:
        break;
    }
  }

  const char* input_dtype(int /*unit*/) override {
    return param_dtype_ ? param_dtype_->c_str() : nullptr;
  }
  bool checkpointed(int unit) override { return checkpointed_.at(static_cast<size_t>(unit)); }

  TracedRun take() { return std::move(run_); }

 private:
  int64_t live() const { return host_memory::tensor_bytes() - base_; }

  // The interval since the last boundary ends: its peak goes to the boundary that opened it.
  void close_interval() {
    if (last_ != nullptr) {
      last_->peak = std::max(last_->peak, host_memory::peak_tensor_bytes() - base_);
    }
    host_memory::reset_peak();
  }
  // A boundary of `list`: closes the interval before it, opens the one after it.
  void boundary(std::vector<TracedBytes>& list) {
    close_interval();
    list.push_back({live(), live()});
    last_ = &list.back();  // the lists only grow at their own boundaries, under the lock
  }
  // The gradients of the unit whose backward just ran: the executor hands them to the
  // reduce-scatter and frees them here; the interval before still counted them.
  void free_gradients() {
    close_interval();
    gradients_.age();
  }

  // The forward time since the last boundary goes to that boundary's unit; the time before
  // the first goes to the first unit's pre_forward. `next` opens the next segment.
  void close_forward_segment(Clock::time_point now, TracedEvent next) {
    const double ms = milliseconds(now - segment_start_);
    if (forward_segment_.unit >= 0) {
      (forward_segment_.enter ? run_.pre_forward_ms
                              : run_.post_forward_ms)[forward_segment_.unit] += ms;
    } else if (next.unit >= 0) {
      run_.pre_forward_ms[next.unit] += ms;
      planner::add_work(run_.pre_forward_work[next.unit], before_first_);
      before_first_ = {};
    }
    forward_segment_ = next;
    segment_start_ = now;
  }

  void close_backward_segment(Clock::time_point now) {
    if (segment_unit_ >= 0) run_.backward_ms[segment_unit_] += milliseconds(now - segment_start_);
    segment_unit_ = -1;
  }

  enum class Phase { kBefore, kForward, kLoss, kBackward, kDone };
  std::mutex mutex_;
  Phase phase_ = Phase::kBefore;
  PhaseWork before_first_;  // forward's work before the first unit boundary
  TracedRun run_;
  std::vector<std::vector<Clock::time_point>> open_;  // per unit, its calls still running
  int segment_unit_ = -1;
  Clock::time_point segment_start_;
  TracedEvent forward_segment_{true, -1};  // the forward boundary that opened the segment
  Clock::time_point loss_start_;
  KeptGradients& gradients_;
  std::optional<std::string> param_dtype_;
  std::vector<bool> checkpointed_;
  int64_t base_ = 0;
  TracedBytes* last_ = nullptr;  // the boundary whose interval is open
};

// Where RegistrationNodes keep gradients while the traced step runs.
class KeepingGradients {
 public:
  explicit KeepingGradients(KeptGradients* kept) { kept_gradients.store(kept); }
  ~KeepingGradients() { kept_gradients.store(nullptr); }
  KeepingGradients(const KeepingGradients&) = delete;
  KeepingGradients& operator=(const KeepingGradients&) = delete;
};

class InstalledHooks {
 public:
  explicit InstalledHooks(UnitHooks* hooks) : previous_(set_unit_hooks(hooks)) {}
  ~InstalledHooks() { set_unit_hooks(previous_); }
  InstalledHooks(const InstalledHooks&) = delete;
  InstalledHooks& operator=(const InstalledHooks&) = delete;

 private:
  UnitHooks* previous_;
};

// The line of an interpreter error that says what went wrong. TorchScript puts a traceback
// before it ("The following operation failed...", "Traceback of TorchScript...", source lines)
// and ends with "RuntimeError: <message>"; a plain c10 error starts with its message.
std::string interpreter_message(const std::string& text) {
  const std::string marker = "Error: ";
  std::string last_error, first;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (first.empty()) first = line;
    const size_t at = line.find(marker);
    if (line[0] != ' ' && at != std::string::npos &&
        line.find_first_of(" \t") > at) {  // "RuntimeError: ..." but not prose with "Error: "
      last_error = line.substr(at + marker.size());
    }
  }
  return last_error.empty() ? first : last_error;
}

bool takes_tensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType || type->kind() == c10::TypeKind::AnyType) {
    return true;
  }
  const auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::TensorType;
}

// One --trace-input per forward argument, in order; arguments with defaults may be left out.
void check_arguments(const torch::jit::Module& model, const std::string& model_path,
                     const std::vector<TraceInput>& inputs) {
  const auto forward = model.find_method("forward");
  if (!forward) {
    fail(ExitCode::kModel, model_path +
                               ": the module has no forward method, so there is no "
                               "step to trace; script a module that defines one");
  }
  const c10::FunctionSchema& schema = forward->function().getSchema();
  const std::vector<c10::Argument>& all = schema.arguments();
  std::vector<c10::Argument> arguments(all.begin() + 1, all.end());  // without self
  std::vector<std::string> names;
  size_t required = 0;
  for (const c10::Argument& a : arguments) {
    names.push_back(a.name());
    if (!a.default_value()) required = names.size();
  }
  const std::string takes = "forward takes " + std::to_string(arguments.size()) + " argument(s) (" +
                            joined(names, ", ") + ")";
  if (inputs.size() > arguments.size() || inputs.size() < required) {
    fail(ExitCode::kUsage, model_path + ": " + takes + ", but " + std::to_string(inputs.size()) +
                               " --trace-input were given; give one per forward argument, in "
                               "order");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!takes_tensor(arguments[i].type())) {
      fail(ExitCode::kUsage, model_path + ": forward argument '" + arguments[i].name() + "' is " +
                                 arguments[i].type()->annotation_str() + ", but --trace-input '" +
                                 inputs[i].spec +
                                 "' makes a Tensor; trace a model whose forward takes tensors");
    }
  }
}

// Failing to allocate it is a usage error naming the input: the input is too large for this
// machine, which is not a bug in mfsdp.
at::Tensor example_tensor(const TraceInput& input, size_t position, TraceDevice device) {
  std::string why = "out of memory";
  try {
    const c10::ScalarType type = scalar_type_of(input.dtype);
    if (device == TraceDevice::kMeta) {
      return at::empty(input.shape, at::TensorOptions().dtype(type).device(at::kMeta));
    }
    if (!schema::is_floating_dtype(input.dtype)) {
      return at::zeros(input.shape, at::TensorOptions().dtype(type));
    }
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(position);
    return at::randn(input.shape, generator, at::TensorOptions().dtype(at::kFloat)).to(type);
  } catch (const c10::Error& e) {
    const std::string message = interpreter_message(e.what_without_backtrace());
    if (message.find("can't allocate memory") == std::string::npos) why = message;
  } catch (const std::bad_alloc&) {
  }
  int64_t bytes = schema::dtype_size(input.dtype);
  for (int64_t dim : input.shape) bytes *= dim;  // parse_trace_input bounds it
  fail(ExitCode::kUsage, "--trace-input '" + input.spec +
                             "': cannot allocate its example tensor of " + std::to_string(bytes) +
                             " bytes (" + why + "); trace with a smaller batch");
}

void collect_tensors(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) {
    out.push_back(value.toTensor());
  } else if (value.isTuple()) {
    for (const c10::IValue& e : value.toTupleRef().elements()) collect_tensors(e, out);
  } else if (value.isList()) {
    for (const c10::IValue& e : value.toListRef()) collect_tensors(e, out);
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) collect_tensors(entry.value(), out);
  }
}

// The traced step's loss, named in `kind`. One floating output of two or more dims is taken as
// logits, [samples, ..., classes], and gets mfsdp run's default loss, cross-entropy (against
// class 0), so that the memory the loss keeps for backward is measured too; otherwise every
// floating output that requires grad is summed, so that each gets a gradient.
at::Tensor loss_of(const c10::IValue& output, std::string& kind) {
  if (output.isTensor()) {
    const at::Tensor& logits = output.toTensor();
    if (logits.defined() && logits.is_floating_point() && logits.requires_grad() &&
        logits.dim() >= 2 && logits.numel() > 0) {
      kind = "cross_entropy";
      const int64_t classes = logits.size(-1);
      const at::Tensor flat = logits.to(at::kFloat).reshape({-1, classes});
      return at::cross_entropy_loss(flat,
                                    at::zeros({flat.size(0)}, flat.options().dtype(at::kLong)));
    }
  }
  kind = "sum";
  std::vector<at::Tensor> tensors;
  collect_tensors(output, tensors);
  at::Tensor loss;
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || !t.is_floating_point() || !t.requires_grad()) continue;
    const at::Tensor sum = t.sum().to(at::kDouble);
    loss = loss.defined() ? loss + sum : sum;
  }
  return loss;
}

// Bytes of the floating outputs that require grad, each storage once: what the loss reads.
int64_t grad_output_bytes(const c10::IValue& output) {
  std::vector<at::Tensor> tensors;
  collect_tensors(output, tensors);
  std::set<const void*> seen;
  int64_t bytes = 0;
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || !t.is_floating_point() || !t.requires_grad()) continue;
    if (!seen.insert(t.storage().unsafeGetStorageImpl()).second) continue;
    bytes += static_cast<int64_t>(t.storage().nbytes());
  }
  return bytes;
}

// Runs `step`, turning the interpreter's errors into one Error(kModel) line.
template <typename Step>
auto interpreted(const std::string& what, Step&& step) {
  try {
    return step();
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    fail(ExitCode::kModel, what + ": " + interpreter_message(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    fail(ExitCode::kModel, what + ": " + interpreter_message(e.what()));
  }
}

// Each time field of `run` becomes its median over `timed` (same units, same calls).
void take_median_times(TracedRun& run, const std::vector<TracedRun>& timed) {
  const auto median = [&](auto field, size_t i) {
    std::vector<double> values;
    for (const TracedRun& t : timed) values.push_back((t.*field)[i]);
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  };
  for (size_t u = 0; u < run.forward_ms.size(); ++u) {
    run.forward_ms[u] = median(&TracedRun::forward_ms, u);
    run.backward_ms[u] = median(&TracedRun::backward_ms, u);
    run.pre_forward_ms[u] = median(&TracedRun::pre_forward_ms, u);
    run.post_forward_ms[u] = median(&TracedRun::post_forward_ms, u);
  }
  std::vector<double> loss;
  for (const TracedRun& t : timed) loss.push_back(t.loss_ms);
  std::sort(loss.begin(), loss.end());
  run.loss_ms = loss.size() % 2 == 1 ? loss[loss.size() / 2]
                                     : (loss[loss.size() / 2 - 1] + loss[loss.size() / 2]) / 2;
  run.timed_steps = static_cast<int>(timed.size());
}

// Every tensor the module's objects hold becomes a meta tensor of its sizes, strides and
// dtype, parameters keeping requires_grad; a tensor held in several places (a tied weight)
// stays one. Nothing is read, so a skeleton converts like a full model.
void move_to_meta(torch::jit::Module& model) {
  std::unordered_map<const c10::TensorImpl*, at::Tensor> moved;
  std::unordered_set<const void*> seen;
  const std::function<void(const c10::intrusive_ptr<c10::ivalue::Object>&)> visit =
      [&](const c10::intrusive_ptr<c10::ivalue::Object>& object) {
        if (!seen.insert(object.get()).second) return;
        for (size_t i = 0; i < object->slots().size(); ++i) {
          const c10::IValue& slot = object->getSlot(i);
          if (slot.isObject()) {
            visit(slot.toObject());
            continue;
          }
          if (!slot.isTensor() || !slot.toTensor().defined()) continue;
          const at::Tensor tensor = slot.toTensor();
          auto found = moved.find(tensor.unsafeGetTensorImpl());
          if (found == moved.end()) {
            at::Tensor meta = at::empty_strided(tensor.sizes(), tensor.strides(),
                                                tensor.options().device(at::kMeta));
            if (tensor.requires_grad()) meta.requires_grad_(true);
            found = moved.emplace(tensor.unsafeGetTensorImpl(), meta).first;
          }
          object->setSlot(i, found->second);
        }
      };
  visit(model._ivalue());
}

// What a meta trace cannot do, said so: an operator with no meta kernel here, or a model
// that reads tensor values.
[[noreturn]] void fail_on_meta(const Error& e, const std::string& model_path) {
  const std::string message = e.what();
  const std::string reads_values =
      model_path +
      ": the shape-only trace (--trace-device meta) cannot run this model: its code "
      "reads a tensor's value (.item(), bool(t), int(t), or a shape computed from "
      "values), and meta tensors have none; trace on the CPU (--trace-device cpu)";
  const std::string marker = "with arguments from the 'Meta' backend";
  if (message.find(marker) != std::string::npos) {
    const std::string lead = "Could not run '";
    const size_t open = message.find(lead);
    std::string op = "an operator";
    if (open != std::string::npos) {
      const size_t from = open + lead.size();
      op = message.substr(from, message.find('\'', from) - from);
    }
    if (op == "aten::_local_scalar_dense") fail(ExitCode::kModel, reads_values);
    fail(ExitCode::kModel, model_path +
                               ": the shape-only trace (--trace-device meta) needs a "
                               "meta kernel for " +
                               op +
                               ", which this LibTorch has none for; trace on the CPU "
                               "(--trace-device cpu) instead, and report the operator");
  }
  fail(e.code(), message +
                     " (the step ran on meta tensors, which have shapes but no values; a model "
                     "that reads values traces only on the CPU, --trace-device cpu)");
}

}  // namespace

TracedRun trace_units(const std::string& model_path, const std::vector<std::string>& unit_paths,
                      const std::vector<TraceInput>& inputs,
                      const std::optional<std::string>& param_dtype,
                      const std::vector<bool>& checkpointed, int timed_steps, TraceDevice device,
                      Attention attention) {
  std::vector<std::vector<std::string>> unit_modules;
  for (const std::string& path : unit_paths) unit_modules.push_back({path});
  return trace_unit_modules(model_path, unit_modules, inputs, param_dtype, checkpointed,
                            timed_steps, device, attention);
}

TracedRun trace_unit_modules(const std::string& model_path,
                             const std::vector<std::vector<std::string>>& unit_paths,
                             const std::vector<TraceInput>& inputs,
                             const std::optional<std::string>& param_dtype,
                             const std::vector<bool>& checkpointed, int timed_steps,
                             TraceDevice device, Attention attention) {
  const bool meta = device == TraceDevice::kMeta;
  if (attention == Attention::kFused && !meta) {
    fail(ExitCode::kUsage, kFusedAttentionNeedsMeta);
  }
  host_memory::install();  // before the step's tensors, so that they are counted
  if (meta) {
    host_memory::install_meta();
    register_missing_meta_kernels();
  }
  torch::jit::Module model = load_module(model_path);
  if (meta) {
    move_to_meta(model);
  } else if (const auto empty = first_tensor_without_data(model)) {
    fail(ExitCode::kUsage, "--trace-input runs a step of the model, but " + model_path +
                               " is a skeleton (saved from the meta device; " + *empty +
                               " has no values); trace its shapes with --trace-device meta, or "
                               "trace the full model file of the same structure");
  }
  check_arguments(model, model_path, inputs);
  std::vector<bool> checkpoints = checkpointed;
  checkpoints.resize(unit_paths.size(), false);
  instrument_unit_modules(model, unit_paths, checkpoints);
  register_parameters(model, param_dtype);

  std::vector<std::string> specs;
  std::vector<c10::IValue> arguments;
  for (size_t i = 0; i < inputs.size(); ++i) {
    specs.push_back(inputs[i].spec);
    arguments.emplace_back(example_tensor(inputs[i], i, device));
  }
  const std::string on = model_path + ": the traced step on --trace-input " + joined(specs, ", ");

  // One step: forward, the loss and backward, heard by `tracer`.
  const auto step = [&](Tracer& tracer, KeptGradients& gradients, int64_t& output_bytes,
                        std::string& run_loss) {
    const InstalledHooks installed(&tracer);
    const KeepingGradients keeping(&gradients);
    const c10::AutoGradMode grad(true);
    // As in the run (Context::create turns graph optimisation off): the graphs run as
    // written, so a checkpointed unit's recompute allocates what the run's does.
    const torch::jit::GraphOptimizerEnabledGuard as_written(false);
    tracer.begin();
    // The outputs stay alive through backward, as in a training loop that holds them.
    c10::IValue output;
    try {
      output = interpreted(on + " failed in forward", [&] {
        try {
          return model.forward(arguments);
        } catch (...) {
          abandon_checkpointed_calls();
          throw;
        }
      });
    } catch (const Error& e) {
      if (meta) fail_on_meta(e, model_path);
      // An embedding (or another op that indexes) given the default float32 input.
      const std::string message = e.what();
      if (message.find("Long, Int; but got") != std::string::npos &&
          message.find("Float") != std::string::npos) {
        std::string fix;
        for (const std::string& spec : specs) {
          fix += (fix.empty() ? "" : " ") + std::string("--trace-input ") +
                 spec.substr(0, spec.find(':')) + ":int64";
        }
        fail(e.code(), message +
                           "; the model wants integer ids there, and --trace-input "
                           "makes float32 unless told: trace with " +
                           fix);
      }
      throw;
    }
    tracer.end_forward();
    output_bytes = grad_output_bytes(output);
    at::Tensor loss;
    try {
      loss = interpreted(on + " failed in the loss", [&] { return loss_of(output, run_loss); });
    } catch (const Error& e) {
      if (meta) fail_on_meta(e, model_path);
      throw;
    }
    if (!loss.defined()) {
      fail(ExitCode::kModel, on + " returned no floating tensor that requires grad, so there is "
                                  "no backward to trace; return the logits or the loss");
    }
    try {
      interpreted(on + " failed in backward", [&] {
        loss.backward();
        return 0;
      });
    } catch (const Error& e) {
      if (meta) fail_on_meta(e, model_path);
      throw;
    }
    tracer.end_backward();
  };

  KeptGradients gradients;
  Tracer tracer(unit_paths.size(), gradients, param_dtype, checkpoints);
  int64_t output_bytes = 0;
  std::string run_loss;
  {
    std::optional<CountingOps> counting;
    if (meta) counting.emplace(tracer);
    std::optional<FusedAttention> fused;
    if (attention == Attention::kFused) fused.emplace();
    step(tracer, gradients, output_bytes, run_loss);
    if (fused && fused->calls() == 0) {
      fail(ExitCode::kUsage, "--fused-attention: " + model_path +
                                 "'s traced step calls no scaled-dot-product attention (its "
                                 "attention, if any, is written out in products and a "
                                 "softmax), so there is nothing to fuse; drop the flag, or "
                                 "call F.scaled_dot_product_attention in the model");
    }
  }
  TracedRun run = tracer.take();
  run.device = device;
  run.attention = attention;
  run.inputs = specs;
  run.units = unit_paths;
  run.checkpointed = checkpoints;
  run.batch = inputs.empty() ? 1 : inputs.front().shape.front();
  run.output_bytes = output_bytes;
  run.loss = run_loss;
  if (meta) {
    run.threads = at::get_num_threads();
    return run;  // nothing ran to time
  }
  if (timed_steps >= 2 || timed_steps == kAutoTimedSteps) {
    std::vector<TracedRun> timed;
    const auto start = std::chrono::steady_clock::now();
    const auto more = [&](int done) {
      if (timed_steps != kAutoTimedSteps) return done < timed_steps;
      const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start;
      return done < kAutoMinSteps || (done < kAutoMaxSteps && spent.count() < kAutoSeconds);
    };
    for (int i = 0; more(i); ++i) {
      KeptGradients kept;
      Tracer timer(unit_paths.size(), kept, param_dtype, checkpoints);
      int64_t ignored_bytes = 0;
      std::string ignored_loss;
      step(timer, kept, ignored_bytes, ignored_loss);
      timed.push_back(timer.take());
    }
    take_median_times(run, timed);
  }
  run.calibration_gflops = reference_gflops();
  run.threads = at::get_num_threads();
  return run;
}

}  // namespace mfsdp::planner
