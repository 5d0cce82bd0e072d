#pragma once
// A LibTorch optimizer's per-parameter state as plain tensors, to be cut and pasted between
// shardings: SGD's momentum buffer, Adam's and AdamW's moments and step count. Every tensor
// is elementwise (shaped like its parameter), which is what makes resharding exact.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace mfsdp::executor {

struct ParamOptimizerState {
  int64_t step = 0;  // Adam's and AdamW's step count; 0 for SGD
  // By name: "momentum_buffer"; or "exp_avg", "exp_avg_sq" (and "max_exp_avg_sq" if defined).
  std::vector<std::pair<std::string, at::Tensor>> tensors;
};

// The state of each parameter of `optimizer`, its parameter groups in order: nothing for a
// parameter that has none yet (before its first step). Throws Error(kUsage) for an optimizer
// other than SGD, Adam or AdamW.
std::vector<std::optional<ParamOptimizerState>> param_states(torch::optim::Optimizer& optimizer);

// Replaces the state of every parameter of `optimizer` with `states` (as param_states gives
// them; the tensors are used as given when they are on the parameter's device, else moved
// there). Error(kUsage) when their number differs from the optimizer's parameters or a state
// does not fit its kind.
void set_param_states(torch::optim::Optimizer& optimizer,
                      std::vector<std::optional<ParamOptimizerState>> states);

// The per-parameter state in an archive that an optimizer's save() wrote (LibTorch's format:
// "state/KEY/..." per parameter, and the KEYs listed per parameter group under
// "param_groups"), by parameter position as param_states gives it. It reads archives of
// LibTorch 1.x and 2.x alike: they spell the keys differently (1.x a hexadecimal pointer, 2.x
// a decimal one), and 2.x's own load() reads every 1.x key as the same parameter. Error(kUsage)
// naming `where` for an archive that is not an optimizer's.
std::vector<std::optional<ParamOptimizerState>> read_param_states(
    torch::serialize::InputArchive& archive, const std::string& where);

}  // namespace mfsdp::executor
