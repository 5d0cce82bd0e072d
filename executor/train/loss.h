#pragma once
// The loss contract of `mfsdp run`: what the model's forward gets and how its output becomes
// the loss of one microbatch. The training loop does, per microbatch,
//
//   Batch b = data->batch(step, m);
//   c10::IValue out = ctx.forward(loss.forward_inputs(b));
//   at::Tensor l = loss.compute(out, b) / microbatches;
//
// compute() is the mean over the microbatch's samples (and tokens). Every rank's microbatch
// has the same size, so the executor's mean over ranks is the mean over the global batch.
// The rules for each kind are in docs/data.md.

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include "executor/train/data.h"

namespace mfsdp::executor {

enum class LossKind {
  kCrossEntropy,  // output: logits [..., C]; target: class ids [...]
  kMse,           // output and target of one shape
  kModel,         // forward(input, target) returns the loss itself
};

// "cross_entropy", "mse" or "model"; anything else is Error(kUsage) naming the choices.
LossKind parse_loss(const std::string& name);
std::string loss_name(LossKind kind);

class Loss {
 public:
  // The data configuration supplies the synthetic targets' seed and names the data in errors.
  Loss(LossKind kind, const DataConfig& data);

  LossKind kind() const { return kind_; }
  // (input) for cross_entropy and mse; (input, target) for model, or (input) when the data
  // has no targets.
  std::vector<c10::IValue> forward_inputs(const Batch& batch) const;
  // A float32 (float64 for a float64 output) scalar. Throws Error(kUsage) when the output or
  // the targets do not fit the loss, naming both and the fix.
  at::Tensor compute(const c10::IValue& output, const Batch& batch) const;

 private:
  at::Tensor cross_entropy(const at::Tensor& logits, const Batch& batch) const;
  at::Tensor mse(const at::Tensor& output, const Batch& batch) const;
  at::Tensor model_loss(const c10::IValue& output) const;

  LossKind kind_;
  bool synthetic_;
  uint64_t seed_;
  std::string data_name_;
};

}  // namespace mfsdp::executor
