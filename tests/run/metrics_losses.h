#pragma once
// Rank 0's loss per step, exactly as a --metrics file has it: what runs compare.

#include <cstdint>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_support.h"

namespace mfsdp::testing {

inline std::map<int64_t, double> rank0_losses(const std::string& metrics) {
  std::map<int64_t, double> out;
  std::istringstream lines(read_file(metrics));
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss") && j.at("rank") == 0) out[j.at("step")] = j.at("loss");
  }
  return out;
}

}  // namespace mfsdp::testing
