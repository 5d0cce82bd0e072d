#pragma once
// What every CLI test needs: the real `mfsdp` binary run from the repository root, and small
// file helpers. MFSDP_SOURCE_DIR and MFSDP_BINARY come from tests/CMakeLists.txt.

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/cli/subprocess.h"

namespace mfsdp::testing {

inline const std::string kRepo = MFSDP_SOURCE_DIR;

inline RunResult mfsdp(const std::vector<std::string>& args) {
  return run_program(MFSDP_BINARY, args, kRepo);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

// Number of newline characters: one-line messages have exactly one.
inline size_t lines(const std::string& text) {
  size_t n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

}  // namespace mfsdp::testing
