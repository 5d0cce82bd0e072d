// Activation checkpointing of units (planner/torchscript/unit_checkpoint.h), without the
// executor: a checkpointed model must give the gradients, the hook events and the dropout
// masks of the same model without checkpointing, while keeping less alive for backward.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/version.h>

#include "planner/torchscript/host_memory.h"
#include "planner/torchscript/instrumentation.h"
#include "planner/torchscript/unit_hooks.h"
#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

// Records the hook calls as "<hook> <unit name>" and checkpoints the units it is given.
class Hooks : public UnitHooks {
 public:
  Hooks(std::vector<std::string> names, std::vector<bool> checkpointed)
      : names_(std::move(names)), checkpointed_(std::move(checkpointed)) {}
  void pre_forward(int u) override { events.push_back("pre_forward " + names_.at(u)); }
  void post_forward(int u) override { events.push_back("post_forward " + names_.at(u)); }
  void pre_backward(int u) override { events.push_back("pre_backward " + names_.at(u)); }
  bool checkpointed(int u) override { return checkpointed_.at(u); }
  std::vector<std::string> events;

 private:
  std::vector<std::string> names_;
  std::vector<bool> checkpointed_;
};

// One model with its units instrumented and its hooks installed while it runs.
struct Instrumented {
  torch::jit::Module model;
  std::unique_ptr<Hooks> hooks;
};

Instrumented instrumented(torch::jit::Module model, const std::vector<std::string>& units,
                          const std::vector<bool>& checkpointed) {
  instrument_units(model, units, checkpointed);
  return {std::move(model), std::make_unique<Hooks>(units, checkpointed)};
}

Instrumented load(const std::string& name, const std::vector<std::string>& units,
                  const std::vector<bool>& checkpointed) {
  return instrumented(torch::jit::load(fixture(name)), units, checkpointed);
}

struct Step {
  at::Tensor output;
  std::map<std::string, at::Tensor> grads;
};

// forward, a loss that weighs every output element differently, backward; hooks installed
// only meanwhile. Gradients are taken and cleared.
Step train_step(Instrumented& m, const std::vector<c10::IValue>& inputs) {
  UnitHooks* previous = set_unit_hooks(m.hooks.get());
  Step step;
  try {
    step.output = m.model.forward(inputs).toTensor();
    const at::Tensor weights = at::arange(step.output.numel(), at::kFloat).reshape_as(step.output);
    (step.output * weights.sin()).sum().backward();
  } catch (...) {
    set_unit_hooks(previous);
    throw;
  }
  set_unit_hooks(previous);
  for (const auto& p : m.model.named_parameters()) {
    if (!p.value.grad().defined()) continue;
    step.grads[p.name] = p.value.grad().clone();
    p.value.mutable_grad() = at::Tensor();
  }
  return step;
}

void expect_same_gradients(const Step& got, const Step& want) {
  ASSERT_EQ(got.grads.size(), want.grads.size());
  EXPECT_TRUE(at::allclose(got.output, want.output, 0, 0));
  for (const auto& [name, grad] : want.grads) {
    ASSERT_TRUE(got.grads.count(name)) << name;
    // The recompute runs the same kernels on the same values. LibTorch 1.13 then gives equal
    // gradients; 2.x may add a tensor's gradient contributions in another order when part of
    // the graph is recomputed (measured with 2.15: up to 2e-6 on elements up to 50), so there
    // they must agree within a few float roundings of the largest element. A wrong recompute
    // (other dropout masks, other inputs) is off by far more.
    const double diff = (got.grads.at(name) - grad).abs().max().item<double>();
    const double scale = grad.abs().max().item<double>();
    const double rounding = TORCH_VERSION_MAJOR < 2 ? 0.0 : 8 * 1.1920929e-7 * scale;
    EXPECT_LE(diff, rounding) << name << ": max difference " << diff << " of max " << scale;
  }
}

at::Tensor token_batch(int64_t batch, int64_t length) {
  return at::arange(batch * length, at::kLong).reshape({batch, length}) % 256;
}

const std::vector<std::string> kGptUnits = {"layers.0", "layers.1", ""};

TEST(Checkpointing, GivesTheGradientsAndHookEventsOfAPlainBackward) {
  Instrumented plain = load("tied_lm.pt", kGptUnits, {});
  Instrumented checkpointed = load("tied_lm.pt", kGptUnits, {true, true, false});
  const Step want = train_step(plain, {token_batch(2, 16)});
  const Step got = train_step(checkpointed, {token_batch(2, 16)});
  expect_same_gradients(got, want);
  EXPECT_EQ(checkpointed.hooks->events, plain.hooks->events);
  EXPECT_TRUE(at::GradMode::is_enabled());
  // A second step recomputes again (the first one's state is gone).
  expect_same_gradients(train_step(checkpointed, {token_batch(2, 16)}),
                        train_step(plain, {token_batch(2, 16)}));
}

TEST(Checkpointing, DrawsTheForwardsDropoutMasksAgain) {
  Instrumented plain = load("dropout_lm.pt", kGptUnits, {});
  Instrumented checkpointed = load("dropout_lm.pt", kGptUnits, {true, true, false});
  torch::manual_seed(7);
  const Step want = train_step(plain, {token_batch(2, 16)});
  torch::manual_seed(7);
  const Step got = train_step(checkpointed, {token_batch(2, 16)});
  expect_same_gradients(got, want);
  // The masks matter: another seed gives other gradients. And the recompute left the RNG
  // where forward had it: the next draw is the one a plain step is followed by.
  const at::Tensor after_checkpointed = torch::rand({4});
  torch::manual_seed(7);
  train_step(plain, {token_batch(2, 16)});
  EXPECT_TRUE(at::equal(torch::rand({4}), after_checkpointed));
  torch::manual_seed(8);
  const Step other = train_step(plain, {token_batch(2, 16)});
  EXPECT_FALSE(
      at::equal(other.grads.at("layers.0.fc.weight"), want.grads.at("layers.0.fc.weight")));
}

TEST(Checkpointing, RecomputesEachCallOfAUnitCalledTwice) {
  const std::vector<std::string> units = {"inp", "shared", "mid", "out", ""};
  Instrumented plain = load("called_twice.pt", units, {});
  Instrumented checkpointed = load("called_twice.pt", units, {false, true, false, false, false});
  torch::manual_seed(0);
  const at::Tensor x = torch::randn({4, 8}).requires_grad_(true);
  const Step want = train_step(plain, {x});
  const at::Tensor x_grad = x.grad().clone();
  x.mutable_grad() = at::Tensor();
  const Step got = train_step(checkpointed, {x});
  expect_same_gradients(got, want);
  // The input's gradient goes through both recomputes.
  EXPECT_TRUE(at::equal(x.grad(), x_grad));
  EXPECT_EQ(checkpointed.hooks->events, plain.hooks->events);
  int pre_backwards = 0;
  for (const auto& e : checkpointed.hooks->events) pre_backwards += e == "pre_backward shared";
  EXPECT_EQ(pre_backwards, 2);
}

// The bytes alive between forward and backward, with the loss computed.
int64_t bytes_kept_for_backward(Instrumented& m) {
  host_memory::install();
  UnitHooks* previous = set_unit_hooks(m.hooks.get());
  const int64_t before = host_memory::tensor_bytes();
  int64_t kept = 0;
  {
    const at::Tensor loss = m.model.forward({token_batch(8, 64)}).toTensor().pow(2).mean();
    kept = host_memory::tensor_bytes() - before;
    loss.backward();
  }
  set_unit_hooks(previous);
  return kept;
}

TEST(Checkpointing, KeepsLessAliveForBackward) {
  Instrumented plain = load("tied_lm.pt", kGptUnits, {});
  Instrumented checkpointed = load("tied_lm.pt", kGptUnits, {true, true, false});
  const int64_t plain_bytes = bytes_kept_for_backward(plain);
  const int64_t checkpointed_bytes = bytes_kept_for_backward(checkpointed);
  // A block's forward keeps ~20 activations of its input's size; checkpointed, the input.
  EXPECT_LT(checkpointed_bytes, plain_bytes / 2) << checkpointed_bytes << " vs " << plain_bytes;
}

TEST(Checkpointing, IsOffWithoutGradMode) {
  Instrumented checkpointed = load("tied_lm.pt", kGptUnits, {true, true, false});
  Instrumented plain = load("tied_lm.pt", kGptUnits, {});
  set_unit_hooks(checkpointed.hooks.get());
  at::Tensor out;
  {
    at::NoGradGuard no_grad;
    out = checkpointed.model.forward({token_batch(2, 16)}).toTensor();
    EXPECT_FALSE(at::GradMode::is_enabled());
  }
  set_unit_hooks(plain.hooks.get());
  at::Tensor want;
  {
    at::NoGradGuard no_grad;
    want = plain.model.forward({token_batch(2, 16)}).toTensor();
  }
  set_unit_hooks(nullptr);
  EXPECT_TRUE(at::GradMode::is_enabled());
  EXPECT_FALSE(out.requires_grad());
  EXPECT_TRUE(at::equal(out, want));
}

// How the model around the unit treats it.
enum class Caller { kPlain, kModifiesInputAfterCall, kPassesABadShape };

// Built from source: a unit whose forward takes non-tensor and container arguments.
torch::jit::Module scaled_model(Caller caller = Caller::kPlain) {
  torch::manual_seed(3);
  torch::jit::Module inner("Scaled");
  inner.register_parameter("w", torch::randn({4, 4}).requires_grad_(true), false);
  inner.define(R"(
def forward(self, x: Tensor, scale: float, bias: Optional[Tensor], extra: List[Tensor]):
    y = torch.tanh(x @ self.w) * scale
    if bias is not None:
        y = y + bias
    for e in extra:
        y = y * e
    return y
)");
  torch::jit::Module outer("Outer");
  outer.register_parameter("b", torch::randn({4}).requires_grad_(true), false);
  outer.register_parameter("e", torch::randn({4}).requires_grad_(true), false);
  outer.register_module("inner", inner);
  const std::string extra = caller == Caller::kPassesABadShape ? "[torch.ones(5)]"  // not 4
                                                               : "[self.e, self.e * 2.0]";
  outer.define(
      "def forward(self, x: Tensor):\n"
      "    h = x * 1.0\n"
      "    y = self.inner.forward(h, 0.5, self.b, " +
      extra + ")\n" + (caller == Caller::kModifiesInputAfterCall ? "    h.mul_(2.0)\n" : "") +
      "    return y\n");
  return outer;
}

TEST(Checkpointing, RecreatesNonTensorAndContainerArguments) {
  Instrumented plain = instrumented(scaled_model(), {"inner", ""}, {});
  Instrumented checkpointed = instrumented(scaled_model(), {"inner", ""}, {true, false});
  torch::manual_seed(0);
  const at::Tensor x = torch::randn({3, 4}).requires_grad_(true);
  const Step want = train_step(plain, {x});
  const Step got = train_step(checkpointed, {x});
  ASSERT_EQ(want.grads.size(), 3u);  // b and e arrive as arguments, w as the unit's own
  expect_same_gradients(got, want);
}

TEST(Checkpointing, RefusesAnInputModifiedInPlaceBeforeBackward) {
  Instrumented checkpointed =
      instrumented(scaled_model(Caller::kModifiesInputAfterCall), {"inner", ""}, {true, false});
  const at::Tensor x = torch::randn({3, 4}).requires_grad_(true);
  EXPECT_MFSDP_ERROR(train_step(checkpointed, {x}), ExitCode::kRuntime,
                     "an input of its forward was modified in place before backward");
}

TEST(Checkpointing, RefusesAUnitThatHoldsAnotherUnit) {
  torch::jit::Module model = torch::jit::load(fixture("tied_lm.pt"));
  EXPECT_MFSDP_ERROR(
      instrument_units(model, {"layers.0", "layers.0.mlp", ""}, {true, false, false}),
      ExitCode::kPlanning,
      "unit 'layers.0' is checkpointed but contains unit 'layers.0.mlp'; "
      "checkpoint units that hold no other unit (e.g. 'layers.0.mlp')");
  // Nothing was changed: the model can still be instrumented.
  instrument_units(model, {"layers.0", "layers.0.mlp", ""}, {false, true, false});
}

TEST(Checkpointing, AbandonedCallsRestoreGradMode) {
  Instrumented failing =
      instrumented(scaled_model(Caller::kPassesABadShape), {"inner", ""}, {true, false});
  set_unit_hooks(failing.hooks.get());
  EXPECT_THROW(failing.model.forward({torch::randn({3, 4})}), std::exception);
  // The failure came inside the checkpointed call, with grad mode off for it.
  EXPECT_FALSE(at::GradMode::is_enabled());
  abandon_checkpointed_calls();
  EXPECT_TRUE(at::GradMode::is_enabled());
  set_unit_hooks(nullptr);
}

}  // namespace
}  // namespace mfsdp::planner
