#pragma once
// Short 2-rank runs of tied_lm-shaped models on the tiny corpus, as the --init-from and skeleton
// tests start them: a plan of blocks and root, 4 steps of AdamW with --metrics by default.

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/cli/cli_test_support.h"

namespace mfsdp::testing {

inline std::string tied_plan(const std::string& model, const std::string& name) {
  const std::string path = temp_path(name + ".plan.json");
  const RunResult r = mfsdp({"plan", model, "--world-size", "2", "--unit", "layers.*", "--unit",
                             "<root>", "-o", path, "-q"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

inline std::vector<std::string> tied_run(const std::string& plan, const std::string& metrics,
                                         int steps = 4) {
  return {"run",
          plan,
          "--data",
          "examples/tiny_corpus.txt",
          "--seq-len",
          "16",
          "--global-batch",
          "8",
          "--steps",
          std::to_string(steps),
          "--optimizer",
          "adamw",
          "--lr",
          "3e-3",
          "--master-port",
          "0",
          "--metrics",
          metrics};
}

}  // namespace mfsdp::testing
