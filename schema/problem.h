#pragma once

#include <string>
#include <vector>

namespace mfsdp::schema {

// One thing wrong with a plan, located by a JSON path such as "units[3].groups[0].padded_numel".
struct Problem {
  std::string path;
  std::string message;
  std::string str() const { return path.empty() ? message : path + ": " + message; }
};

}  // namespace mfsdp::schema
