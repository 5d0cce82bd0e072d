// Activation memory of a traced step (trace_units' bytes, measure_activations' plan section),
// checked on models built from TorchScript source whose saved tensors can be counted by hand:
// relu keeps its output for backward, mul keeps its operands (which already exist), matmul
// keeps its operands, and a temporary nobody keeps is freed.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>

#include "planner/sharding_scope.h"
#include "planner/trace_input.h"
#include "schema/plan_check.h"

namespace mfsdp::planner {
namespace {

constexpr int64_t kFloat = 4;

// A model of `units` children u0, u1, ... called in a chain, each computing `body` from x and
// its parameter w of `w_shape`; saved where the test's temporary directory is.
std::string chain_model(const std::string& name, int units, const std::string& body,
                        const std::vector<int64_t>& w_shape) {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module model(c10::QualifiedName("Chain"), cu);
  std::string calls = "x";
  for (int i = 0; i < units; ++i) {
    torch::jit::Module child(c10::QualifiedName("Link" + std::to_string(i)), cu);
    child.register_parameter("w", torch::randn(w_shape).requires_grad_(), false);
    child.define("def forward(self, x):\n  return " + body + "\n");
    model.register_module("u" + std::to_string(i), child);
    calls = "self.u" + std::to_string(i) + ".forward(" + calls + ")";
  }
  model.define("def forward(self, x):\n  return " + calls + "\n");
  const std::string path = (std::filesystem::path(::testing::TempDir()) / (name + ".pt")).string();
  model.save(path);
  return path;
}

std::vector<std::string> unit_paths(int units) {
  std::vector<std::string> paths = {""};
  for (int i = 0; i < units; ++i) paths.push_back("u" + std::to_string(i));
  return paths;
}

std::vector<TraceInput> input(const std::string& spec) {
  return {parse_trace_input(spec)};
}

// Per unit path, what its forward left alive: alive at its exit less at its entry, less what
// the units nested in it left (the same rule the plan states, recomputed from the events).
std::map<std::string, int64_t> kept_by_unit(const TracedRun& run) {
  std::map<std::string, int64_t> kept;
  std::vector<std::pair<int64_t, int64_t>> open;  // live at entry, kept by nested units
  for (size_t i = 0; i < run.forward.size(); ++i) {
    const int64_t live = run.forward_bytes[i].live;
    if (run.forward[i].enter) {
      open.push_back({live, 0});
      continue;
    }
    const int64_t delta = live - open.back().first;
    kept[schema::unit_name_of(run.units[run.forward[i].unit])] += delta - open.back().second;
    open.pop_back();
    if (!open.empty()) open.back().second += delta;
  }
  return kept;
}

// relu(x * w): the product is a temporary nobody keeps, relu keeps its output, which is also
// what the unit returns. So each unit leaves one [batch, features] float tensor alive, and
// while it runs two exist (the product and relu's output).
TEST(TracedActivations, EachUnitLeavesAliveWhatItsBackwardNeeds) {
  const std::string model = chain_model("relu_chain", 3, "torch.relu(x * self.w)", {1024});
  const TracedRun run = trace_units(model, unit_paths(3), input("4x1024"));
  const int64_t tensor = 4 * 1024 * kFloat;
  ASSERT_EQ(run.forward_bytes.size(), run.forward.size());
  ASSERT_EQ(run.backward_bytes.size(), run.backward.size());
  EXPECT_EQ(run.batch, 4);
  EXPECT_EQ(run.loss, "cross_entropy");
  EXPECT_EQ(run.output_bytes, tensor);
  const std::map<std::string, int64_t> kept = kept_by_unit(run);
  EXPECT_EQ(kept.at("<root>"), 0);
  for (const std::string unit : {"u0", "u1", "u2"}) {
    SCOPED_TRACE(unit);
    EXPECT_EQ(kept.at(unit), tensor);
  }
  // Inside each unit's forward the product and relu's output coexist.
  for (size_t i = 0; i < run.forward.size(); ++i) {
    if (!run.forward[i].enter || run.units[run.forward[i].unit].front().empty()) continue;
    EXPECT_EQ(run.forward_bytes[i].peak, run.forward_bytes[i].live + 2 * tensor) << i;
  }
  // Forward ends with the three outputs alive; the loss then keeps its log-probabilities and
  // backward's first gradients are as large as the logits.
  EXPECT_EQ(run.loss_bytes.live, 3 * tensor);
  EXPECT_GE(run.loss_bytes.peak, run.loss_bytes.live + 2 * tensor);
}

// Under a param_dtype the units compute in it, as the executor's mixed precision does: the
// kept tensors are bfloat16, half the bytes. Forward keeps three of them: the float32 input
// cast to bfloat16 where the first unit begins (its mul saves it), and each unit's output.
TEST(TracedActivations, AreMeasuredInTheParamDtype) {
  const std::string model = chain_model("relu_chain_bf16", 2, "torch.relu(x * self.w)", {512});
  const TracedRun run = trace_units(model, unit_paths(2), input("4x512"), "bfloat16");
  const int64_t tensor = 4 * 512 * 2;
  const std::map<std::string, int64_t> kept = kept_by_unit(run);
  EXPECT_EQ(kept.at("u1"), tensor);
  EXPECT_EQ(kept.at("<root>") + kept.at("u0") + kept.at("u1"), 3 * tensor);
  EXPECT_EQ(run.output_bytes, tensor);
}

// Activations grow with the batch: twice the samples, twice the bytes.
TEST(TracedActivations, GrowLinearlyWithTheBatch) {
  const std::string model = chain_model("relu_chain_batch", 2, "torch.relu(x * self.w)", {256});
  const TracedRun two = trace_units(model, unit_paths(2), input("2x256"));
  const TracedRun four = trace_units(model, unit_paths(2), input("4x256"));
  EXPECT_EQ(kept_by_unit(four).at("u1"), 2 * kept_by_unit(two).at("u1"));
  EXPECT_EQ(four.loss_bytes.live, 2 * two.loss_bytes.live);
}

// A parameter's gradient is freed when the next unit's backward begins, as the executor's
// reduce-scatter frees it, so gradients of large weights do not pile up over backward.
// A unit's gradients live while the executor reduce-scatters them, beside the next unit's
// backward, and are gone when the one after begins: they never accumulate over backward.
TEST(TracedActivations, AUnitsGradientsLiveThroughTheNextUnitsBackwardOnly) {
  const std::string model = chain_model("matmul_chain", 3, "torch.relu(x @ self.w)", {256, 256});
  const TracedRun run = trace_units(model, unit_paths(3), input("4x256"));
  const int64_t weight = 256 * 256 * kFloat;
  ASSERT_EQ(run.backward.size(), 4u);  // <root>, u2, u1, u0
  for (size_t i = 0; i < run.backward.size(); ++i) {
    SCOPED_TRACE(run.units[run.backward[i]]);
    // Alive at each boundary: activations (a few [4, 256] tensors) and, from u1 on, the
    // previous unit's weight gradient, in its reduce-scatter; never two of them.
    EXPECT_LT(run.backward_bytes[i].live, weight + weight / 2);
    if (i >= 2) {
      EXPECT_GE(run.backward_bytes[i].live, weight);
    }
  }
  // While a unit's backward runs, its own gradient joins the previous one: two, not three.
  int64_t most = 0;
  for (const TracedBytes& b : run.backward_bytes) most = std::max(most, b.peak);
  EXPECT_GE(most, 2 * weight);
  EXPECT_LT(most, 3 * weight);
}

// The plan states the traced bytes: per unit in forward order, the peak and where it is, and
// the combined peak as the sum check_plan verifies.
TEST(TracedActivations, ThePlanStatesThemAndChecksTheirSums) {
  const std::string model = chain_model("relu_chain_plan", 2, "torch.relu(x * self.w)", {512});
  ShardedModel sharded = ShardedModel::load(model);
  ShardingScope scope(sharded, {2, 2, 1}, {});
  scope.fully_shard("<root>");
  scope.fully_shard("u0");
  scope.fully_shard("u1");
  const TracedRun run = trace_units(model, unit_paths(2), input("8x512"));
  scope.use_trace(run);
  const schema::Plan plan = scope.finalize();
  ASSERT_TRUE(plan.memory.activations.has_value());
  const schema::Activations& a = *plan.memory.activations;
  EXPECT_EQ(a.microbatch, 8);
  EXPECT_EQ(a.loss, "cross_entropy");
  ASSERT_EQ(a.units.size(), 3u);
  EXPECT_EQ(a.units[0].unit, "<root>");
  EXPECT_EQ(a.units[1].unit, "u0");
  EXPECT_EQ(a.units[1].saved_bytes, 8 * 512 * kFloat);
  EXPECT_EQ(a.units[2].saved_bytes, 8 * 512 * kFloat);
  int64_t peak = run.loss_bytes.peak;
  for (const TracedBytes& b : run.forward_bytes) peak = std::max(peak, b.peak);
  for (const TracedBytes& b : run.backward_bytes) peak = std::max(peak, b.peak);
  EXPECT_EQ(a.peak_bytes, peak);
  // Backward's first gradients come on top of everything forward kept.
  EXPECT_GT(a.peak_bytes, run.loss_bytes.live);
  EXPECT_TRUE(a.peak_at == "loss" || a.peak_at.rfind("pre_backward ", 0) == 0) << a.peak_at;
  EXPECT_EQ(a.combined_peak_bytes, a.peak_bytes + plan.memory.sharded_param_bytes +
                                       plan.memory.sharded_grad_bytes + plan.memory.slot_bytes);
  EXPECT_TRUE(schema::check_plan(plan).empty());

  schema::Plan edited = plan;
  edited.memory.activations->combined_peak_bytes += 1;
  edited.memory.activations->units.pop_back();
  const auto problems = schema::check_plan(edited);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].path, "memory.activations.units");
  EXPECT_EQ(problems[1].path, "memory.activations.combined_peak_bytes");
}

}  // namespace
}  // namespace mfsdp::planner
