#include "planner/torchscript/meta_kernels.h"

#include <array>
#include <mutex>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/version.h>

namespace mfsdp::planner {
namespace {

// Each kernel gives its outputs the shapes, dtypes and layouts the CPU kernel gives them,
// so that a meta trace allocates what a CPU trace does (tests/planner/meta_trace_test.cpp).

at::Tensor index_select_meta(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  std::vector<int64_t> shape = self.sizes().vec();
  if (self.dim() > 0) shape[at::maybe_wrap_dim(dim, self.dim())] = index.numel();
  return at::empty(shape, self.options());
}

at::Tensor embedding_dense_backward_meta(const at::Tensor& grad_output,
                                         const at::Tensor& /*indices*/, int64_t num_weights,
                                         int64_t /*padding_idx*/, bool /*scale_grad_by_freq*/) {
  return at::empty({num_weights, grad_output.size(-1)}, grad_output.options());
}

// Statistics per normalised row, [leading dims..., 1, ...], in the input's dtype.
std::vector<int64_t> stat_shape(const at::Tensor& input, size_t normalized_dims) {
  std::vector<int64_t> shape = input.sizes().vec();
  const size_t axis = shape.size() - normalized_dims;
  for (size_t d = axis; d < shape.size(); ++d) shape[d] = 1;
  return shape;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_meta(
    const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const c10::optional<at::Tensor>& /*weight*/, const c10::optional<at::Tensor>& /*bias*/,
    double /*eps*/) {
  const std::vector<int64_t> stats = stat_shape(input, normalized_shape.size());
  return {at::empty(input.sizes(), input.options()), at::empty(stats, input.options()),
          at::empty(stats, input.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward_meta(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef /*normalized_shape*/,
    const at::Tensor& /*mean*/, const at::Tensor& /*rstd*/, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, std::array<bool, 3> mask) {
  at::Tensor grad_input, grad_weight, grad_bias;
  if (mask[0]) grad_input = at::empty(input.sizes(), grad_out.options());
  if (mask[1] && weight && weight->defined()) {
    grad_weight = at::empty(weight->sizes(), weight->options());
  }
  if (mask[2] && bias && bias->defined()) grad_bias = at::empty(bias->sizes(), bias->options());
  return {grad_input, grad_weight, grad_bias};
}

at::Tensor& logical_not_out_meta(const at::Tensor& self, at::Tensor& out) {
  out.resize_(self.sizes());
  return out;
}

// A kernel registered for Meta itself: a composite one that Meta would fall back to is not
// enough (1.13's native_layer_norm falls back to one built on native_batch_norm, which has
// no meta kernel either), and registering beside a composite one overrides nothing.
// Per channel (dim 1) statistics in the parameters' dtype when training, empty otherwise, as
// the CPU kernel saves them; the running statistics are updated in place, allocating nothing.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_meta(
    const at::Tensor& input, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& /*bias*/, const c10::optional<at::Tensor>& /*running_mean*/,
    const c10::optional<at::Tensor>& /*running_var*/, bool training, double /*momentum*/,
    double /*eps*/) {
  const at::TensorOptions stats = weight && weight->defined() ? weight->options() : input.options();
  const int64_t channels = training && input.dim() >= 2 ? input.size(1) : 0;
  return {at::empty_like(input), at::empty({channels}, stats), at::empty({channels}, stats)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward_meta(
    const at::Tensor& grad_out, const at::Tensor& input, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& /*running_mean*/,
    const c10::optional<at::Tensor>& /*running_var*/,
    const c10::optional<at::Tensor>& /*save_mean*/,
    const c10::optional<at::Tensor>& /*save_invstd*/, bool /*train*/, double /*eps*/,
    std::array<bool, 3> mask) {
  const at::TensorOptions params =
      weight && weight->defined() ? weight->options() : input.options();
  const int64_t channels = input.dim() >= 2 ? input.size(1) : 1;
  at::Tensor grad_input, grad_weight, grad_bias;
  if (mask[0]) grad_input = at::empty(input.sizes(), grad_out.options());
  if (mask[1]) grad_weight = at::empty({channels}, params);
  if (mask[2]) grad_bias = at::empty({channels}, params);
  return {grad_input, grad_weight, grad_bias};
}

#if TORCH_VERSION_MAJOR < 2
// 1.13 computes repeat_interleave(x, int) through a tensor of the repeats, whose values a meta
// tensor loses (GQA attention repeats its keys and values so). As the CPU does, less the
// values: an index of the repeated rows (int64), and index_select, which keeps it for
// backward. Registered above autograd, like the composite it replaces.
at::Tensor repeat_interleave_int_meta(const at::Tensor& self, int64_t repeats,
                                      c10::optional<int64_t> dim,
                                      c10::optional<int64_t> /*output_size*/) {
  const at::Tensor input = dim ? self : self.flatten();
  const int64_t d = at::maybe_wrap_dim(dim.value_or(0), input.dim());
  const at::Tensor index = at::empty({input.size(d) * repeats}, input.options().dtype(at::kLong));
  return input.index_select(d, index);
}
#endif

// where(condition, self, other): the three broadcast, in self's and other's promoted dtype.
// LibTorch 2.x's math attention masks its scores so; Python's torch registers this from Python.
// 2.x computes where.self through where.self_out, which needs its own.
std::vector<int64_t> where_shape(const at::Tensor& condition, const at::Tensor& self,
                                 const at::Tensor& other) {
  return at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes());
}

at::Tensor where_self_meta(const at::Tensor& condition, const at::Tensor& self,
                           const at::Tensor& other) {
  return at::empty(where_shape(condition, self, other),
                   self.options().dtype(at::result_type(self, other)));
}

at::Tensor& where_self_out_meta(const at::Tensor& condition, const at::Tensor& self,
                                const at::Tensor& other, at::Tensor& out) {
  out.resize_(where_shape(condition, self, other));
  return out;
}

at::Tensor same_shape_meta(const at::Tensor& self) {
  return at::empty_like(self);
}

at::Tensor& in_place_meta(at::Tensor& self) {
  return self;
}

bool has_meta_kernel(const char* name, const char* overload) {
  const auto op = c10::Dispatcher::singleton().findSchema({name, overload});
  return !op || op->hasKernelForDispatchKey(c10::DispatchKey::Meta);
}

}  // namespace

std::vector<std::string> register_missing_meta_kernels() {
  static std::once_flag once;
  static std::vector<std::string> registered;
  std::call_once(once, [] {
    // Never destroyed: the kernels stay registered for the process.
    auto* library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Meta,
                                       __FILE__, __LINE__);
    const auto add = [&](const char* name, const char* overload, auto kernel) {
      const std::string full = std::string("aten::") + name;
      if (has_meta_kernel(full.c_str(), overload)) return;
      const std::string qualified = *overload ? std::string(name) + "." + overload : name;
      library->impl(qualified.c_str(), kernel);
      registered.push_back(full);
    };
    add("index_select", "", TORCH_FN(index_select_meta));
    add("embedding_dense_backward", "", TORCH_FN(embedding_dense_backward_meta));
    add("native_layer_norm", "", TORCH_FN(native_layer_norm_meta));
    add("native_layer_norm_backward", "", TORCH_FN(native_layer_norm_backward_meta));
    add("logical_not", "out", TORCH_FN(logical_not_out_meta));
    add("native_batch_norm", "", TORCH_FN(native_batch_norm_meta));
    add("native_batch_norm_backward", "", TORCH_FN(native_batch_norm_backward_meta));
    add("relu", "", TORCH_FN(same_shape_meta));
    add("where", "self", TORCH_FN(where_self_meta));
    add("where", "self_out", TORCH_FN(where_self_out_meta));
    add("relu_", "", TORCH_FN(in_place_meta));
#if TORCH_VERSION_MAJOR < 2
    auto* autograd = new torch::Library(torch::Library::IMPL, "aten",
                                        c10::DispatchKey::AutogradMeta, __FILE__, __LINE__);
    autograd->impl("repeat_interleave.self_int", TORCH_FN(repeat_interleave_int_meta));
    registered.push_back("aten::repeat_interleave.self_int");
#endif
  });
  return registered;
}

}  // namespace mfsdp::planner
