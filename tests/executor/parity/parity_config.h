#pragma once
// What both sides of a parity run agree on: batch size, optimizer settings, result files.

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "executor/train/sharded_optimizer.h"

namespace mfsdp::testing {

// Divisible by 2, 3 and 4 ranks times 1 or 4 microbatches.
inline constexpr int64_t kParityBatch = 48;

// The units of tests/fixtures/reordered.pt, whose forward calls them out of definition order.
inline const std::vector<std::string> kReorderedUnits = {"stem",     "blocks.0", "blocks.1",
                                                         "blocks.2", "head",     "<root>"};

// A checked-in test input: tests/fixtures/FILE of the source tree the tests were built from,
// or of $MFSDP_SOURCE_DIR when set (prebuilt test binaries run on another machine's checkout).
inline std::string fixture_path(const std::string& file) {
  const char* root = std::getenv("MFSDP_SOURCE_DIR");
  return std::string(root && *root ? root : MFSDP_SOURCE_DIR) + "/tests/fixtures/" + file;
}

executor::OptimizerConfig parity_optimizer(const std::string& kind);

void save_parity_result(const std::string& path, const std::map<std::string, at::Tensor>& params,
                        const std::vector<double>& losses);
void load_parity_result(const std::string& path, std::map<std::string, at::Tensor>& params,
                        std::vector<double>& losses);

}  // namespace mfsdp::testing
