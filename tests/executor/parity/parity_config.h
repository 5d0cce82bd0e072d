#pragma once
// What both sides of a parity run agree on: batch size, optimizer settings, result files.

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "executor/train/sharded_optimizer.h"

namespace mfsdp::testing {

// Divisible by 2, 3 and 4 ranks times 1 or 4 microbatches.
inline constexpr int64_t kParityBatch = 48;

executor::OptimizerConfig parity_optimizer(const std::string& kind);

void save_parity_result(const std::string& path, const std::map<std::string, at::Tensor>& params,
                        const std::vector<double>& losses);
void load_parity_result(const std::string& path, std::map<std::string, at::Tensor>& params,
                        std::vector<double>& losses);

}  // namespace mfsdp::testing
