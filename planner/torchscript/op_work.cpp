#include "planner/torchscript/op_work.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/function_schema.h>
#include <ATen/record_function.h>

#include "planner/torchscript/fused_attention.h"
#include "schema/error.h"

namespace mfsdp::planner {

namespace {

// How an operator of a class gets its FLOPs from its arguments.
enum class Formula {
  kMm,                 // (a [n,k], b [k,m])
  kAddmm,              // (c, a [n,k], b [k,m])
  kBmm,                // (a [b,n,k], b [b,k,m])
  kBaddbmm,            // (c, a [b,n,k], b [b,k,m])
  kMv,                 // (a [n,k], v [k])
  kAddmv,              // (c, a [n,k], v [k])
  kDot,                // (a [n], b [n])
  kConvolution,        // (input, weight, bias, stride, padding, dilation, transposed, ...)
  kConvBackward,       // (grad_output, input, weight, ..., transposed at 7, ..., output_mask at 10)
  kAttention,          // (query [..., L, E], key [..., S, E], value [..., S, Ev], ...)
  kAttentionBackward,  // (grad_out, query, key, value, ...)
  kFusedAttentionBackward,  // (grad_out, query, key, value, out, logsumexp, is_causal)
  kLookup,                  // (table, ...): reads the rows it returns, not the whole table
  kNone,                    // bytes only
};

struct Classified {
  OpClass op_class;
  Formula formula;
};

const std::unordered_map<std::string_view, Classified>& classes() {
  static const auto* table = new std::unordered_map<std::string_view, Classified>{
      {"aten::mm", {OpClass::kMatmul, Formula::kMm}},
      {"aten::addmm", {OpClass::kMatmul, Formula::kAddmm}},
      {"aten::_addmm_activation", {OpClass::kMatmul, Formula::kAddmm}},
      {"aten::bmm", {OpClass::kMatmul, Formula::kBmm}},
      {"aten::baddbmm", {OpClass::kMatmul, Formula::kBaddbmm}},
      {"aten::addbmm", {OpClass::kMatmul, Formula::kBaddbmm}},
      {"aten::mv", {OpClass::kMatmul, Formula::kMv}},
      {"aten::addmv", {OpClass::kMatmul, Formula::kAddmv}},
      {"aten::dot", {OpClass::kMatmul, Formula::kDot}},
      {"aten::vdot", {OpClass::kMatmul, Formula::kDot}},
      {"aten::convolution", {OpClass::kMatmul, Formula::kConvolution}},
      {"aten::_convolution", {OpClass::kMatmul, Formula::kConvolution}},
      {"aten::convolution_backward", {OpClass::kMatmul, Formula::kConvBackward}},
      {"aten::scaled_dot_product_attention", {OpClass::kAttention, Formula::kAttention}},
      {"aten::_scaled_dot_product_attention", {OpClass::kAttention, Formula::kAttention}},
      {"aten::_scaled_dot_product_attention_math", {OpClass::kAttention, Formula::kAttention}},
      {"aten::_scaled_dot_product_flash_attention", {OpClass::kAttention, Formula::kAttention}},
      {"aten::_scaled_dot_product_efficient_attention", {OpClass::kAttention, Formula::kAttention}},
      {"aten::_scaled_dot_product_cudnn_attention", {OpClass::kAttention, Formula::kAttention}},
      {"aten::_scaled_dot_product_flash_attention_backward",
       {OpClass::kAttention, Formula::kAttentionBackward}},
      {"aten::_scaled_dot_product_efficient_attention_backward",
       {OpClass::kAttention, Formula::kAttentionBackward}},
      {"aten::_scaled_dot_product_cudnn_attention_backward",
       {OpClass::kAttention, Formula::kAttentionBackward}},
      {"mfsdp::fused_attention_backward", {OpClass::kAttention, Formula::kFusedAttentionBackward}},
      {"aten::embedding", {OpClass::kEmbedding, Formula::kLookup}},
      {"aten::index_select", {OpClass::kEmbedding, Formula::kLookup}},
      {"aten::embedding_dense_backward", {OpClass::kEmbedding, Formula::kNone}},
      {"aten::embedding_backward", {OpClass::kEmbedding, Formula::kNone}},
  };
  return *table;
}

// Operators that make a view, an empty tensor or nothing: they move no bytes of their own.
bool moves_nothing(std::string_view name) {
  static const char* const kNames[] = {
      "aten::empty",
      "aten::empty_strided",
      "aten::empty_like",
      "aten::new_empty",
      "aten::new_empty_strided",
      "aten::as_strided",
      "aten::view",
      "aten::_reshape_alias",
      "aten::reshape",
      "aten::_unsafe_view",
      "aten::expand",
      "aten::expand_as",
      "aten::t",
      "aten::transpose",
      "aten::permute",
      "aten::select",
      "aten::slice",
      "aten::unsqueeze",
      "aten::squeeze",
      "aten::detach",
      "aten::alias",
      "aten::lift_fresh",
      "aten::resize_",
      "aten::set_",
      "aten::unfold",
      "aten::view_as",
      "aten::split",
      "aten::split_with_sizes",
      "aten::chunk",
      "aten::narrow",
      "aten::unbind",
      "aten::diagonal",
      "aten::flatten",
      "aten::unflatten",
      "aten::contiguous",
      "aten::numpy_T",
      "aten::mT",
      "aten::matrix_H",
      "aten::real",
      "aten::_unsafe_split",
      "aten::result_type",
      "aten::is_nonzero",
      "aten::size",
      "aten::stride",
      "aten::to",
      "aten::type_as",
      "aten::resolve_conj",
      "aten::resolve_neg",
      "aten::_has_compatible_shallow_copy_type",
      "aten::requires_grad_",
      "aten::_version",
  };
  if (name.substr(0, 6) != "aten::") return true;  // mfsdp's unit operators, prim::, ...
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

int64_t tensor_bytes(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    return t.defined() ? static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size())
                       : 0;
  }
  int64_t bytes = 0;
  if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorVector()) {
      if (t.defined()) bytes += static_cast<int64_t>(t.numel() * t.element_size());
    }
  } else if (value.isList()) {
    for (const c10::IValue& e : value.toListRef()) bytes += tensor_bytes(e);
  } else if (value.isTuple()) {
    for (const c10::IValue& e : value.toTupleRef().elements()) bytes += tensor_bytes(e);
  }
  return bytes;
}

int64_t tensor_elements(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    return t.defined() ? static_cast<int64_t>(t.numel()) : 0;
  }
  int64_t elements = 0;
  if (value.isList()) {
    for (const c10::IValue& e : value.toListRef()) elements += tensor_elements(e);
  } else if (value.isTuple()) {
    for (const c10::IValue& e : value.toTupleRef().elements()) elements += tensor_elements(e);
  }
  return elements;
}

const at::Tensor* tensor_at(c10::ArrayRef<const c10::IValue> inputs, size_t i) {
  if (i >= inputs.size() || !inputs[i].isTensor()) return nullptr;
  const at::Tensor& t = inputs[i].toTensor();
  return t.defined() ? &t : nullptr;
}

int64_t product(c10::IntArrayRef sizes, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t d = from; d < to && d < sizes.size(); ++d) p *= sizes[d];
  return p;
}

// 2 FLOPs per multiply-add of a product of `a` [..., n, k] and `b` [..., k, m].
int64_t product_flops(const at::Tensor* a, const at::Tensor* b) {
  if (a == nullptr || b == nullptr || a->dim() < 1 || b->dim() < 1) return 0;
  const int64_t m = b->dim() >= 2 ? b->size(-1) : 1;
  return 2 * static_cast<int64_t>(a->numel()) * m;
}

// A convolution's FLOPs, once its output is known: 2 per multiply-add, each weight element
// applied at every output position (transposed: every input position) of every sample.
struct ConvShape {
  int64_t weight_elements = 0;
  int64_t samples = 0;
  int64_t input_positions = 0;
  bool transposed = false;
  int products = 1;  // backward: the gradients it computes (input, weight)
};

struct Frame {
  const char* name = nullptr;
  bool inside_class = false;  // an enclosing operator of a class counts this one's work
  std::optional<Classified> classified;
  bool counted_below = false;  // an operator inside this one counted
  int64_t input_bytes = 0;
  int64_t flops = 0;
  std::optional<ConvShape> conv;
};

thread_local std::vector<Frame> frames;
std::atomic<WorkSink*> active_sink{nullptr};

int64_t conv_flops(const ConvShape& conv, const at::Tensor* output) {
  int64_t positions = conv.input_positions;
  if (!conv.transposed) {
    if (output == nullptr || output->dim() < 2) return 0;
    positions = product(output->sizes(), 2, static_cast<size_t>(output->dim()));
  }
  return 2 * conv.weight_elements * conv.samples * positions * conv.products;
}

// The operator's bool argument `is_causal`, false where it has none.
bool causal(const at::RecordFunction& fn, c10::ArrayRef<const c10::IValue> in) {
  const c10::optional<c10::FunctionSchema> schema = fn.operator_schema();
  if (!schema) return false;
  const c10::optional<int> at = schema->argumentIndexWithName("is_causal");
  return at && static_cast<size_t>(*at) < in.size() && in[*at].isBool() && in[*at].toBool();
}

void classify_start(Frame& frame, const at::RecordFunction& fn,
                    c10::ArrayRef<const c10::IValue> in) {
  const Formula formula = frame.classified->formula;
  switch (formula) {
    case Formula::kMm:
    case Formula::kBmm:
    case Formula::kMv:
      frame.flops = product_flops(tensor_at(in, 0), tensor_at(in, 1));
      break;
    case Formula::kAddmm:
    case Formula::kBaddbmm:
    case Formula::kAddmv:
      frame.flops = product_flops(tensor_at(in, 1), tensor_at(in, 2));
      break;
    case Formula::kDot: {
      const at::Tensor* a = tensor_at(in, 0);
      frame.flops = a ? 2 * static_cast<int64_t>(a->numel()) : 0;
      break;
    }
    case Formula::kConvolution:
    case Formula::kConvBackward: {
      const bool backward = formula == Formula::kConvBackward;
      const at::Tensor* input = tensor_at(in, backward ? 1 : 0);
      const at::Tensor* weight = tensor_at(in, backward ? 2 : 1);
      const size_t transposed_at = backward ? 7 : 6;
      if (input == nullptr || weight == nullptr || input->dim() < 2) break;
      ConvShape conv;
      conv.weight_elements = static_cast<int64_t>(weight->numel());
      conv.samples = input->size(0);
      conv.input_positions = product(input->sizes(), 2, static_cast<size_t>(input->dim()));
      conv.transposed =
          transposed_at < in.size() && in[transposed_at].isBool() && in[transposed_at].toBool();
      if (backward) {
        conv.products = 0;
        if (in.size() > 10 && in[10].isBoolList()) {
          const c10::List<bool> mask = in[10].toBoolList();
          for (size_t i = 0; i < 2 && i < mask.size(); ++i) conv.products += mask.get(i) ? 1 : 0;
        }
        // The gradients' products run over the forward's output positions: grad_output's.
        const at::Tensor* grad = tensor_at(in, 0);
        if (!conv.transposed && grad != nullptr && grad->dim() >= 2) {
          frame.flops = 2 * conv.weight_elements * conv.samples *
                        product(grad->sizes(), 2, static_cast<size_t>(grad->dim())) * conv.products;
          break;
        }
      }
      frame.conv = conv;
      break;
    }
    case Formula::kAttention:
    case Formula::kAttentionBackward:
    case Formula::kFusedAttentionBackward: {
      const size_t q_at = formula == Formula::kAttention ? 0 : 1;
      const at::Tensor* q = tensor_at(in, q_at);
      const at::Tensor* k = tensor_at(in, q_at + 1);
      const at::Tensor* v = tensor_at(in, q_at + 2);
      if (q == nullptr || k == nullptr || v == nullptr || q->dim() < 2 || k->dim() < 2) break;
      // Scores q k^T and their product with v; backward computes two products per each.
      const int64_t scores = static_cast<int64_t>(q->numel()) / q->size(-1) * k->size(-2);
      frame.flops = 2 * scores * (q->size(-1) + v->size(-1));
      if (formula == Formula::kAttentionBackward) frame.flops *= 2;
      // The fused kernel's backward recomputes the scores, then dV, dP, dQ and dK: 3 products
      // over the head dimension and 2 over the value's. Fused kernels skip the tiles a causal
      // mask hides: half the scores.
      if (formula == Formula::kFusedAttentionBackward) {
        frame.flops = 2 * scores * (3 * q->size(-1) + 2 * v->size(-1));
      }
      const bool fused = formula == Formula::kFusedAttentionBackward || fused_attention_active();
      if (fused && causal(fn, in)) frame.flops /= 2;
      break;
    }
    case Formula::kLookup:
    case Formula::kNone:
      break;
  }
  for (size_t i = 0; i < in.size(); ++i) {
    if (formula == Formula::kLookup && i == 0) continue;  // the table: only its rows are read
    frame.input_bytes += tensor_bytes(in[i]);
  }
}

// A boxed call (the TorchScript interpreter's) passes its whole stack as inputs and outputs:
// the operator's own are the last ones, as many as its schema has.
c10::ArrayRef<const c10::IValue> own(c10::ArrayRef<const c10::IValue> values, size_t count) {
  return values.size() > count ? values.slice(values.size() - count) : values;
}

c10::ArrayRef<const c10::IValue> inputs_of(const at::RecordFunction& fn) {
  return own(fn.inputs(), fn.num_inputs());
}

c10::ArrayRef<const c10::IValue> outputs_of(const at::RecordFunction& fn) {
  const std::vector<c10::IValue>& all = fn.outputs();
  return own(c10::ArrayRef<const c10::IValue>(all.data(), all.size()), fn.num_outputs());
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Frame frame;
  frame.name = fn.name();
  if (!frames.empty()) {
    const Frame& parent = frames.back();
    frame.inside_class = parent.inside_class || parent.classified.has_value();
  }
  if (!frame.inside_class && active_sink.load() != nullptr) {
    const auto found = classes().find(frame.name);
    if (found != classes().end()) {
      frame.classified = found->second;
      classify_start(frame, fn, inputs_of(fn));
    } else if (!moves_nothing(frame.name)) {
      for (const c10::IValue& v : inputs_of(fn)) frame.input_bytes += tensor_bytes(v);
    }
  }
  frames.push_back(std::move(frame));
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* /*context*/) {
  if (frames.empty()) return;
  Frame frame = std::move(frames.back());
  frames.pop_back();
  WorkSink* sink = active_sink.load();
  if (sink == nullptr || frame.inside_class) return;
  bool counted = false;
  if (frame.classified) {
    int64_t output_bytes = 0;
    for (const c10::IValue& v : outputs_of(fn)) output_bytes += tensor_bytes(v);
    if (frame.classified->formula == Formula::kLookup) output_bytes *= 2;  // rows read, written
    int64_t flops = frame.flops;
    if (frame.conv) {
      const at::Tensor* output = tensor_at(outputs_of(fn), 0);
      flops = conv_flops(*frame.conv, output);
    }
    sink->add_work(frame.classified->op_class, {flops, frame.input_bytes + output_bytes, 1});
    counted = true;
  } else if (!frame.counted_below && !moves_nothing(frame.name)) {
    int64_t output_bytes = 0, elements = 0;
    for (const c10::IValue& v : outputs_of(fn)) {
      output_bytes += tensor_bytes(v);
      elements += tensor_elements(v);
    }
    if (output_bytes > 0) {
      sink->add_work(OpClass::kElementwise, {elements, frame.input_bytes + output_bytes, 1});
      counted = true;
    }
  }
  if ((counted || frame.counted_below) && !frames.empty()) frames.back().counted_below = true;
}

}  // namespace

CountingOps::CountingOps(WorkSink& sink) {
  WorkSink* none = nullptr;
  if (!active_sink.compare_exchange_strong(none, &sink)) {
    fail(ExitCode::kInternal, "two operator counts at once in one process; please report it");
  }
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                      .needsInputs(true)
                                      .needsOutputs(true)
                                      .scopes({at::RecordScope::FUNCTION}));
}

CountingOps::~CountingOps() {
  at::removeCallback(handle_);
  active_sink.store(nullptr);
}

}  // namespace mfsdp::planner
