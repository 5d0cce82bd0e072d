// Loops in the static call trace (planner/torchscript/torch_model.cpp): a loop whose trip count
// the graph fixes is unrolled into one call per turn; one whose count or condition depends on
// data, or that would unroll past a million trace events, stays one call flagged under_loop.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <memory>
#include <string>

#include "planner/torchscript/torch_model.h"

namespace mfsdp::planner {
namespace {

// A model whose forward has `body` (TorchScript, indented by two spaces) and a child `step`
// (x * w) for it to call.
torch::jit::Module loop_model(const std::string& body) {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module model(c10::QualifiedName("Loops"), cu);
  torch::jit::Module step(c10::QualifiedName("Step"), cu);
  step.register_parameter("w", torch::ones({2}), false);
  step.define("def forward(self, x):\n  return x * self.w\n");
  model.register_module("step", step);
  model.define("def forward(self, x):\n" + body);
  return model;
}

// Expects `body` to call step `count` times, flagged under_loop or not.
void expect_step_calls(const std::string& body, int64_t count, bool under_loop) {
  SCOPED_TRACE(body);
  const ModelIR ir = extract_model(loop_model(body), "loops");
  const int step = ir.find_module("step");
  int64_t calls = 0;
  bool flagged = false;
  for (const CallEvent& e : ir.trace) {
    if (e.kind != CallEvent::Kind::kEnter || e.module != step) continue;
    ++calls;
    flagged = flagged || e.under_loop;
  }
  EXPECT_EQ(calls, count);
  EXPECT_EQ(flagged, under_loop);
}

TEST(LoopUnrolling, AConstantRangeIsOneCallPerTurn) {
  expect_step_calls("  for _ in range(3):\n    x = self.step.forward(x)\n  return x\n", 3, false);
  expect_step_calls("  for _ in range(0):\n    x = self.step.forward(x)\n  return x\n", 0, false);
}

TEST(LoopUnrolling, NestedLoopsAndALoopOverAListMultiply) {
  expect_step_calls(
      "  for i in range(2):\n"
      "    for s in [1.0, 2.0, 3.0]:\n"
      "      x = self.step.forward(x) * s\n"
      "  return x\n",
      6, false);
}

// A list that grows before the loop has another length than the one it was built with.
TEST(LoopUnrolling, ALoopOverAListChangedBeforehandStaysOneFlaggedCall) {
  expect_step_calls(
      "  scales = [1.0, 2.0]\n"
      "  scales.append(3.0)\n"
      "  for s in scales:\n"
      "    x = self.step.forward(x) * s\n"
      "  return x\n",
      1, true);
}

TEST(LoopUnrolling, ACountOrAConditionFromDataStaysOneFlaggedCall) {
  expect_step_calls(
      "  n = int(x.sum())\n"
      "  for _ in range(n):\n"
      "    x = self.step.forward(x)\n"
      "  return x\n",
      1, true);
  // A break makes the condition to go on depend on data.
  expect_step_calls(
      "  for _ in range(3):\n"
      "    x = self.step.forward(x)\n"
      "    if bool(x.sum() > 0):\n"
      "      break\n"
      "  return x\n",
      1, true);
}

// A loop that calls no module unrolls to nothing, however long.
TEST(LoopUnrolling, ALongLoopWithoutCallsCostsNothing) {
  expect_step_calls(
      "  for _ in range(4000000000000000000):\n"
      "    x = x + 1.0\n"
      "  return self.step.forward(x)\n",
      1, false);
}

TEST(LoopUnrolling, ALoopTooLongToUnrollStaysOneFlaggedCall) {
  expect_step_calls("  for _ in range(2000000):\n    x = self.step.forward(x)\n  return x\n", 1,
                    true);
}

}  // namespace
}  // namespace mfsdp::planner
