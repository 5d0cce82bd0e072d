#pragma once
// `mfsdp run --init normal:STD`: initial parameter values from a documented rule instead of any
// file (docs/large-models.md#initialiser). Every element's value is a function of the seed, the
// parameter's name and the element's index alone, so each rank computes only the slices its
// shards hold, and every world size, plan and rank starts from the same model.

#include <cstdint>
#include <string>
#include <vector>

#include <torch/script.h>

#include "schema/plan.h"

namespace mfsdp::executor {

class Initializer {
 public:
  // What a parameter gets, by its name and shape: kZeros for a bias (the name's last part is
  // "bias"), kOnes for any other 1-D parameter (norm scales), kNormal (mean 0, the spec's
  // standard deviation) for the rest (weights of 2 or more dimensions, embeddings).
  enum class Rule { kZeros, kOnes, kNormal };
  static Rule rule_for(const std::string& name, const std::vector<int64_t>& shape);

  // `spec` is "normal:STD" with STD > 0 (e.g. normal:0.02); Error(kUsage), one line, if not.
  // Describes what `plan`'s parameters get, for the log.
  Initializer(const std::string& spec, uint64_t seed, const schema::Plan& plan);

  // Elements [first, first + count) of parameter `param`'s values, row-major, float32.
  at::Tensor slice(const schema::ParamLayout& param, int64_t first, int64_t count) const;
  // Gives every buffer of a skeleton `module` (they hold no values) its value by name:
  // running_mean and num_batches_tracked zeros, running_var ones (batch norm's). Error(kUsage)
  // listing the others; buffers with values keep them.
  void load_buffers(torch::jit::Module& module) const;
  // "normal:0.02 with seed 0: 20 weight(s) from normal(0, 0.02), 6 bias(es) zeros, 5 1-D
  // weight(s) ones".
  const std::string& description() const { return description_; }

 private:
  double std_ = 0;
  uint64_t seed_ = 0;
  std::string description_;
};

}  // namespace mfsdp::executor
