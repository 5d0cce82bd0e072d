#include "executor/train/loss.h"

#include <sstream>

#include <torch/torch.h>

#include "executor/train/tensor_text.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

// Reduced-precision outputs (bf16, fp16) are promoted so the loss and its mean are exact
// enough; float64 stays float64.
at::Tensor promoted(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? t : t.to(at::kFloat);
}

}  // namespace

LossKind parse_loss(const std::string& name) {
  if (name == "cross_entropy") return LossKind::kCrossEntropy;
  if (name == "mse") return LossKind::kMse;
  if (name == "model") return LossKind::kModel;
  fail(ExitCode::kUsage, "unknown --loss '" + name + "'; choose cross_entropy, mse or model");
}

std::string loss_name(LossKind kind) {
  switch (kind) {
    case LossKind::kCrossEntropy:
      return "cross_entropy";
    case LossKind::kMse:
      return "mse";
    case LossKind::kModel:
      return "model";
  }
  return "?";
}

Loss::Loss(LossKind kind, const DataConfig& data)
    : kind_(kind),
      synthetic_(data.kind == "synthetic"),
      seed_(data.seed),
      data_name_(synthetic_ ? "synthetic data" : data.path) {}

std::vector<c10::IValue> Loss::forward_inputs(const Batch& batch) const {
  if (kind_ == LossKind::kModel && batch.target.defined()) return {batch.input, batch.target};
  return {batch.input};
}

at::Tensor Loss::compute(const c10::IValue& output, const Batch& batch) const {
  if (kind_ == LossKind::kModel) return model_loss(output);
  const std::string name = "--loss " + loss_name(kind_);
  if (!output.isTensor()) {
    fail(ExitCode::kUsage, name + " needs forward to return one tensor, but it returned a " +
                               std::string(output.tagKind()) +
                               "; return the output tensor, or the loss with --loss model");
  }
  const at::Tensor out = output.toTensor();
  if (!at::isFloatingType(out.scalar_type()) || out.dim() == 0 ||
      out.size(0) != batch.sample_ids.size(0)) {
    fail(ExitCode::kUsage, name + " needs a floating output with one row per sample (" +
                               std::to_string(batch.sample_ids.size(0)) +
                               "), but forward returned " + tensor_text(out) +
                               "; return per-sample outputs, or the loss with --loss model");
  }
  return kind_ == LossKind::kCrossEntropy ? cross_entropy(out, batch) : mse(out, batch);
}

at::Tensor Loss::cross_entropy(const at::Tensor& output, const Batch& batch) const {
  const at::Tensor logits = promoted(output);
  if (logits.dim() < 2) {
    fail(ExitCode::kUsage,
         "--loss cross_entropy needs logits [samples, ..., classes], but "
         "forward returned " +
             tensor_text(output) + "; return logits, or use --loss mse");
  }
  const int64_t classes = logits.size(-1);
  const auto per_logit = logits.sizes().slice(0, logits.dim() - 1);
  at::Tensor target = batch.target;
  // Synthetic targets are free to choose: the next token when the model predicts one per
  // input token, otherwise a class per sample (id mod C), the same on every position.
  const bool fits = target.defined() && target.sizes() == per_logit;
  if (synthetic_ && !fits) {
    target = (batch.sample_ids % classes).reshape({-1}).clone();
    std::vector<int64_t> view(per_logit.size(), 1);
    view[0] = target.size(0);
    target = target.view(view).expand(per_logit);
  } else if (!target.defined()) {
    fail(ExitCode::kUsage, "--loss cross_entropy needs class ids, but " + data_name_ +
                               " has no targets; save (inputs, targets) or use --loss model");
  } else if (at::isFloatingType(target.scalar_type())) {
    fail(ExitCode::kUsage, "--loss cross_entropy needs integer class ids, but the targets of " +
                               data_name_ + " are " + tensor_text(target) + "; use --loss mse");
  } else if (!fits) {
    fail(ExitCode::kUsage, "--loss cross_entropy: targets " + shape_text(target.sizes()) + " of " +
                               data_name_ + " do not match logits " + shape_text(logits.sizes()) +
                               " (one class id per logit vector: the logits' shape without the "
                               "last dim); check --seq-len and the model's output");
  }
  const at::Tensor flat = target.reshape({-1}).to(logits.device(), at::kLong);
  const at::Tensor bad = (flat < 0).logical_or(flat >= classes);
  if (bad.any().item<bool>()) {
    const int64_t id = flat.masked_select(bad)[0].item<int64_t>();
    fail(ExitCode::kUsage, "--loss cross_entropy: target id " + std::to_string(id) + " of " +
                               data_name_ + " is outside the " + std::to_string(classes) +
                               " classes of the logits " + shape_text(logits.sizes()) +
                               "; ids must be below the model's output size (check "
                               "--vocab-size and the data)");
  }
  return torch::nn::functional::cross_entropy(logits.reshape({-1, classes}), flat);
}

at::Tensor Loss::mse(const at::Tensor& output, const Batch& batch) const {
  const at::Tensor out = promoted(output);
  at::Tensor target;
  if (synthetic_) {
    // N(0, 1) per sample from (seed, sample id), shaped like that sample's output.
    const auto per_sample = out.sizes().slice(1);
    const at::Tensor ids = batch.sample_ids.to(at::kCPU).contiguous();
    std::vector<at::Tensor> rows;
    for (int64_t i = 0; i < ids.size(0); ++i) {
      at::Generator gen = at::detail::createCPUGenerator(
          sample_seed(seed_, kTargetStream, ids.data_ptr<int64_t>()[i]));
      rows.push_back(at::randn(per_sample, gen, at::kFloat));
    }
    target = at::stack(rows).to(out.device(), out.scalar_type());
  } else if (!batch.target.defined()) {
    fail(ExitCode::kUsage, "--loss mse needs targets, but " + data_name_ +
                               " has none; save (inputs, targets) or use --loss model");
  } else if (!at::isFloatingType(batch.target.scalar_type())) {
    fail(ExitCode::kUsage, "--loss mse needs floating targets, but the targets of " + data_name_ +
                               " are " + tensor_text(batch.target) +
                               "; use --loss cross_entropy for class or token ids");
  } else if (batch.target.sizes() != out.sizes()) {
    fail(ExitCode::kUsage, "--loss mse: the output " + shape_text(out.sizes()) +
                               " and the target " + shape_text(batch.target.sizes()) + " of " +
                               data_name_ + " differ in shape; they must be equal");
  } else {
    target = batch.target.to(out.device(), out.scalar_type());
  }
  return at::mse_loss(out, target);
}

at::Tensor Loss::model_loss(const c10::IValue& output) const {
  std::string returned;
  if (!output.isTensor()) {
    returned = "a " + std::string(output.tagKind());
  } else if (output.toTensor().numel() != 1 ||
             !at::isFloatingType(output.toTensor().scalar_type())) {
    returned = "a tensor " + tensor_text(output.toTensor());
  } else {
    return promoted(output.toTensor()).reshape({});
  }
  fail(ExitCode::kUsage,
       "--loss model needs forward(input, target) to return the loss as a "
       "floating scalar tensor, but it returned " +
           returned + "; return the mean loss, or use --loss cross_entropy or mse");
}

}  // namespace mfsdp::executor
