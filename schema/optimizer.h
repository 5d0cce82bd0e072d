#pragma once
// The optimizers a plan can name (`training.optimizer`, `prediction.optimizer`, --optimizer),
// in one table that every site naming an optimizer reads: the plan checks, the cost model and
// profiles (the key of `optimizer_ns_per_element`), the rank memory a prediction counts, the
// probe's timings and the flags that accept a name. Building the LibTorch optimizer for a name
// stays in executor/train/sharded_optimizer.cpp and the probe's reference step. No LibTorch.

#include <string>
#include <vector>

namespace mfsdp::schema {

struct OptimizerKind {
  const char* name;  // "sgd" | "adam" | "adamw": the plan's spelling and the profiles' key
  // Buffers of optimizer state per parameter element, in the main gradients' dtype (SGD's
  // momentum; Adam's and AdamW's two moments).
  int state_buffers;
  // Bytes one float32 step reads and writes per element: the parameter, its gradient and the
  // state read, the parameter and the state written (SGD with momentum 20, Adam and AdamW 28).
  int bytes_per_element;
};

// Every optimizer, in the order documentation and errors list them: sgd, adam, adamw.
const std::vector<OptimizerKind>& optimizer_kinds();
// The names in that order.
std::vector<std::string> optimizer_names();
// "sgd, adam or adamw", for errors that list the choices.
std::string optimizer_choices();
// The entry for `name`, or nullptr for a name that is not an optimizer.
const OptimizerKind* find_optimizer(const std::string& name);
// The optimizer a plan's training defaults or a prediction fall back to.
inline constexpr const char* kDefaultOptimizer = "adamw";

}  // namespace mfsdp::schema
