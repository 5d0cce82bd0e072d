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

struct StepCalls {
  int64_t count = 0;
  bool under_loop = false;
};

StepCalls step_calls(const std::string& body) {
  const ModelIR ir = extract_model(loop_model(body), "loops");
  const int step = ir.find_module("step");
  StepCalls out;
  for (const CallEvent& e : ir.trace) {
    if (e.kind != CallEvent::Kind::kEnter || e.module != step) continue;
    ++out.count;
    out.under_loop = out.under_loop || e.under_loop;
  }
  return out;
}

TEST(LoopUnrolling, AConstantRangeIsOneCallPerTurn) {
  const StepCalls calls = step_calls("  for _ in range(3):\n    x = self.step.forward(x)\n  return x\n");
  EXPECT_EQ(calls.count, 3);
  EXPECT_FALSE(calls.under_loop);
}

TEST(LoopUnrolling, NestedLoopsAndALoopOverAListMultiply) {
  const StepCalls calls = step_calls(
      "  for i in range(2):\n"
      "    for s in [1.0, 2.0, 3.0]:\n"
      "      x = self.step.forward(x) * s\n"
      "  return x\n");
  EXPECT_EQ(calls.count, 6);
  EXPECT_FALSE(calls.under_loop);
}

TEST(LoopUnrolling, ZeroTurnsCallNothing) {
  const StepCalls calls = step_calls("  for _ in range(0):\n    x = self.step.forward(x)\n  return x\n");
  EXPECT_EQ(calls.count, 0);
}

TEST(LoopUnrolling, ACountFromDataStaysOneFlaggedCall) {
  const StepCalls calls = step_calls(
      "  n = int(x.sum())\n"
      "  for _ in range(n):\n"
      "    x = self.step.forward(x)\n"
      "  return x\n");
  EXPECT_EQ(calls.count, 1);
  EXPECT_TRUE(calls.under_loop);
}

TEST(LoopUnrolling, ABreakMakesTheConditionDataDependent) {
  const StepCalls calls = step_calls(
      "  for _ in range(3):\n"
      "    x = self.step.forward(x)\n"
      "    if bool(x.sum() > 0):\n"
      "      break\n"
      "  return x\n");
  EXPECT_EQ(calls.count, 1);
  EXPECT_TRUE(calls.under_loop);
}

TEST(LoopUnrolling, ALoopTooLongToUnrollStaysOneFlaggedCall) {
  const StepCalls calls =
      step_calls("  for _ in range(2000000):\n    x = self.step.forward(x)\n  return x\n");
  EXPECT_EQ(calls.count, 1);
  EXPECT_TRUE(calls.under_loop);
}

}  // namespace
}  // namespace mfsdp::planner
