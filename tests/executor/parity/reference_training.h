#pragma once
// The independent side of a parity test: plain single-process LibTorch training of the same
// model on the same global batches (TorchScript forward, autograd, torch::optim), without any
// mfsdp runtime code.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "tests/executor/parity/training_task.h"

namespace mfsdp::testing {

struct TrainingResult {
  std::map<std::string, at::Tensor> params;  // every registered name, tied ones included
  std::vector<double> losses;                // per step, over the global batch
  // Adam-family only: elements whose gradient was zero up to rounding in every step (their
  // second-moment estimate is nonzero but below 1e-6 of the tensor's largest). Adam divides such
  // noise by its own magnitude, so any change of summation order, even within one process, changes
  // their updates by up to the learning rate; the key bias of attention is one (softmax is
  // invariant to it). Empty for SGD.
  std::map<std::string, at::Tensor> rounding_only;
  // With clipping: the global gradient norm of each step, before clipping.
  std::vector<double> grad_norms;
};

// `clip_grad_norm`: clip the gradients' global L2 norm to this before each step. `device`:
// where the model trains (a single-GPU reference for the GPU runtime); results are on the CPU.
TrainingResult train_reference(const TrainingTask& task, const std::string& model_path, int steps,
                               const std::string& optimizer,
                               std::optional<double> clip_grad_norm = std::nullopt,
                               at::Device device = at::kCPU);

// max |a - b| / max |b| over a tensor: 0 for identical tensors. How parity tests compare a
// trained parameter with the reference's.
double relative_difference(const at::Tensor& a, const at::Tensor& b);

}  // namespace mfsdp::testing
