#include "planner/torchscript/fused_attention.h"

#include <atomic>
#include <memory>
#include <mutex>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>
#include <torch/version.h>

#include "schema/error.h"

namespace mfsdp::planner {
namespace {

std::atomic<bool> active{false};
std::atomic<int64_t> calls_since_start{0};

// What the fused kernel's backward computes, shapes only: the gradients of query, key, value.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_attention_backward_meta(
    const at::Tensor& /*grad_out*/, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& /*out*/, const at::Tensor& /*logsumexp*/,
    bool /*is_causal*/) {
  return {at::empty_like(query), at::empty_like(key), at::empty_like(value)};
}

void define_backward_operator() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Never destroyed: the operator stays defined for the process.
    auto* def =
        new torch::Library(torch::Library::FRAGMENT, "mfsdp", c10::nullopt, __FILE__, __LINE__);
    def->def(
        "fused_attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, "
        "Tensor out, Tensor logsumexp, bool is_causal) -> (Tensor, Tensor, Tensor)");
    auto* impl = new torch::Library(torch::Library::IMPL, "mfsdp", c10::DispatchKey::Meta, __FILE__,
                                    __LINE__);
    impl->impl("fused_attention_backward", TORCH_FN(fused_attention_backward_meta));
    // Backward runs it without a graph (no double backward): autograd passes it through.
    auto* autograd = new torch::Library(torch::Library::IMPL, "mfsdp", c10::DispatchKey::Autograd,
                                        __FILE__, __LINE__);
    autograd->impl("fused_attention_backward", torch::CppFunction::makeFallthrough());
  });
}

// Forward saves what the fused kernel keeps; backward calls the one operator it runs.
struct FusedAttentionFunction : torch::autograd::Function<FusedAttentionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& query,
                            const at::Tensor& key, const at::Tensor& value,
                            const c10::optional<at::Tensor>& mask, bool is_causal) {
    std::vector<int64_t> out_shape = query.sizes().vec();
    out_shape.back() = value.size(-1);
    at::Tensor out = at::empty(out_shape, query.options());
    std::vector<int64_t> rows = query.sizes().vec();
    rows.pop_back();
    at::Tensor logsumexp = at::empty(rows, query.options().dtype(at::kFloat));
    ctx->save_for_backward({query, key, value, out, logsumexp});
    ctx->saved_data["is_causal"] = is_causal;
    if (mask && mask->defined()) ctx->saved_data["mask"] = *mask;  // the kernel reads it again
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    static const auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("mfsdp::fused_attention_backward", "")
            .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                const at::Tensor&, const at::Tensor&, bool)>();
    at::Tensor grad_out = grads[0].defined() ? grads[0] : at::empty_like(saved[3]);
    auto [dq, dk, dv] = op.call(grad_out, saved[0], saved[1], saved[2], saved[3], saved[4],
                                ctx->saved_data["is_causal"].toBool());
    return {dq, dk, dv, at::Tensor(), at::Tensor()};
  }
};

at::Tensor fused(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                 const c10::optional<at::Tensor>& mask, bool is_causal) {
  if (query.dim() < 2 || key.dim() < 2 || value.dim() < 2) {
    fail(ExitCode::kModel,
         "scaled_dot_product_attention: query, key and value need at least 2 "
         "dimensions (..., L, E)");
  }
  calls_since_start.fetch_add(1);
  return FusedAttentionFunction::apply(query, key, value, mask, is_causal);
}

#if TORCH_VERSION_MAJOR < 2
// aten::_scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
// need_attn_weights, is_causal) -> (output, weights): the fused kernels return no weights.
std::tuple<at::Tensor, at::Tensor> attention_autograd_meta(const at::Tensor& query,
                                                           const at::Tensor& key,
                                                           const at::Tensor& value,
                                                           const c10::optional<at::Tensor>& mask,
                                                           double /*dropout_p*/,
                                                           bool need_attn_weights, bool is_causal) {
  if (need_attn_weights) {
    fail(ExitCode::kModel,
         "--fused-attention: the model asks scaled_dot_product_attention for "
         "its attention weights, which a fused kernel does not return; "
         "trace without --fused-attention");
  }
  return {fused(query, key, value, mask, is_causal), at::empty({0}, query.options())};
}
constexpr const char* kAttentionOperator = "_scaled_dot_product_attention";
#else
// aten::scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, *,
// scale, enable_gqa): GQA's fewer key and value heads are read as they are.
at::Tensor attention_autograd_meta(const at::Tensor& query, const at::Tensor& key,
                                   const at::Tensor& value, const c10::optional<at::Tensor>& mask,
                                   double /*dropout_p*/, bool is_causal,
                                   c10::optional<double> /*scale*/, bool /*enable_gqa*/) {
  return fused(query, key, value, mask, is_causal);
}
constexpr const char* kAttentionOperator = "scaled_dot_product_attention";
#endif

std::unique_ptr<torch::Library>& registration() {
  static std::unique_ptr<torch::Library> library;
  return library;
}

}  // namespace

FusedAttention::FusedAttention() {
  bool none = false;
  if (!active.compare_exchange_strong(none, true)) {
    fail(ExitCode::kInternal,
         "two fused-attention traces at once in one process; please "
         "report it");
  }
  calls_since_start.store(0);
  define_backward_operator();
  // Above autograd, as the composite it replaces; unregistered again when this ends.
  registration() = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::AutogradMeta, __FILE__, __LINE__);
  registration()->impl(kAttentionOperator, TORCH_FN(attention_autograd_meta));
}

FusedAttention::~FusedAttention() {
  registration().reset();
  active.store(false);
}

int64_t FusedAttention::calls() const {
  return calls_since_start.load();
}

bool fused_attention_active() {
  return active.load();
}

}  // namespace mfsdp::planner
