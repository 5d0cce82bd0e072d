#include "planner/torchscript/instrumentation.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/script.h>

#include "planner/torchscript/unit_hooks.h"
#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

using Events = std::vector<std::string>;

// Records every hook call as "<hook> <unit name>".
class RecordingHooks : public UnitHooks {
 public:
  explicit RecordingHooks(std::vector<std::string> names) : names_(std::move(names)) {}
  void pre_forward(int unit) override { record("pre_forward", unit); }
  void post_forward(int unit) override { record("post_forward", unit); }
  void pre_backward(int unit) override { record("pre_backward", unit); }
  // The events since the last call.
  Events take() { return std::exchange(events_, {}); }

 private:
  void record(const char* hook, int unit) {
    events_.push_back(std::string(hook) + " " + names_.at(static_cast<size_t>(unit)));
  }
  std::vector<std::string> names_;
  Events events_;
};

// The graph executor configurations a model may run under.
struct ExecutorConfig {
  bool optimize;
  bool profiling_executor;
};

std::string config_name(const ::testing::TestParamInfo<ExecutorConfig>& info) {
  return std::string(info.param.optimize ? "Optimized" : "Unoptimized") +
         (info.param.profiling_executor ? "Profiling" : "Legacy");
}

class Instrumentation : public ::testing::TestWithParam<ExecutorConfig> {
 protected:
  void SetUp() override {
    saved_optimize_ = torch::jit::getGraphExecutorOptimize();
    saved_profiling_ = torch::jit::getExecutorMode().load();
    torch::jit::setGraphExecutorOptimize(GetParam().optimize);
    torch::jit::getExecutorMode() = GetParam().profiling_executor;
    torch::manual_seed(0);
  }
  void TearDown() override {
    set_unit_hooks(nullptr);
    torch::jit::setGraphExecutorOptimize(saved_optimize_);
    torch::jit::getExecutorMode() = saved_profiling_;
  }

  // Loads `name`, instruments `units` and installs hooks that record under the units' names.
  torch::jit::Module load_instrumented(const std::string& name,
                                       const std::vector<std::string>& units) {
    torch::jit::Module model = torch::jit::load(fixture(name));
    instrument_units(model, units);
    hooks_ = std::make_unique<RecordingHooks>(units);
    set_unit_hooks(hooks_.get());
    return model;
  }

  std::unique_ptr<RecordingHooks> hooks_;

 private:
  bool saved_optimize_ = true;
  bool saved_profiling_ = true;
};

INSTANTIATE_TEST_SUITE_P(Executors, Instrumentation,
                         ::testing::Values(ExecutorConfig{true, true}, ExecutorConfig{false, true},
                                           ExecutorConfig{true, false},
                                           ExecutorConfig{false, false}),
                         config_name);

at::Tensor forward(torch::jit::Module& model, const at::Tensor& input) {
  return model.forward({input}).toTensor();
}

void backward(const at::Tensor& output) {
  output.square().sum().backward();
}

// Both have no gradient (a branch not taken), or equal ones.
bool same_grad(const at::Tensor& a, const at::Tensor& b) {
  if (!a.grad().defined() || !b.grad().defined()) return a.grad().defined() == b.grad().defined();
  return torch::equal(a.grad(), b.grad());
}

at::Tensor tokens() {
  return torch::arange(32, torch::kLong).reshape({2, 16});
}
at::Tensor features8() {
  return torch::randn({4, 8});
}
at::Tensor features16() {
  return torch::randn({4, 16});
}

TEST_P(Instrumentation, UnitsFireInCallOrderAndBackwardInReverse) {
  auto model =
      load_instrumented("reordered.pt", {"stem", "blocks.0", "blocks.1", "blocks.2", "head"});
  const at::Tensor x = torch::randn({4, 8});
  for (int step = 0; step < 3; ++step) {
    const at::Tensor out = forward(model, x);
    EXPECT_EQ(hooks_->take(),
              (Events{"pre_forward stem", "post_forward stem", "pre_forward blocks.2",
                      "post_forward blocks.2", "pre_forward blocks.0", "post_forward blocks.0",
                      "pre_forward blocks.1", "post_forward blocks.1", "pre_forward head",
                      "post_forward head"}))
        << "step " << step;
    backward(out);
    EXPECT_EQ(hooks_->take(),
              (Events{"pre_backward head", "pre_backward blocks.1", "pre_backward blocks.0",
                      "pre_backward blocks.2", "pre_backward stem"}))
        << "step " << step;
  }
}

// A merged unit (blocks.2 and blocks.0, which forward calls one after the other) reports one
// call: pre_forward as the first of its modules begins, post_forward as the last ends, one
// pre_backward when gradients reach it; outputs and gradients are the model's own.
TEST_P(Instrumentation, AMergedUnitFiresOncePerCall) {
  auto reference = torch::jit::load(fixture("reordered.pt"));
  auto model = torch::jit::load(fixture("reordered.pt"));
  instrument_unit_modules(model, {{"stem"}, {"blocks.0", "blocks.2"}, {"blocks.1"}, {"head"}});
  RecordingHooks hooks({"stem", "blocks.0+blocks.2", "blocks.1", "head"});
  set_unit_hooks(&hooks);
  for (int step = 0; step < 3; ++step) {
    const at::Tensor x = torch::randn({4, 8});
    const at::Tensor out = forward(model, x);
    const at::Tensor expected = forward(reference, x);
    EXPECT_TRUE(torch::equal(out, expected));
    EXPECT_EQ(hooks.take(),
              (Events{"pre_forward stem", "post_forward stem", "pre_forward blocks.0+blocks.2",
                      "post_forward blocks.0+blocks.2", "pre_forward blocks.1",
                      "post_forward blocks.1", "pre_forward head", "post_forward head"}))
        << "step " << step;
    backward(out);
    backward(expected);
    EXPECT_EQ(hooks.take(), (Events{"pre_backward head", "pre_backward blocks.1",
                                    "pre_backward blocks.0+blocks.2", "pre_backward stem"}))
        << "step " << step;
  }
  const auto params = model.named_parameters();
  const auto expected_params = reference.named_parameters();
  for (auto e = expected_params.begin(), p = params.begin(); p != params.end(); ++e, ++p) {
    EXPECT_TRUE(same_grad((*p).value, (*e).value)) << (*p).name;
  }
}

// The planner refuses merged modules that do not run once each; should such a model run
// anyway, a module that begins twice in one call of its unit fails forward.
TEST_P(Instrumentation, AMergedUnitWhoseModuleRunsTwiceInOneCallFailsForward) {
  auto model = torch::jit::load(fixture("called_twice.pt"));
  instrument_unit_modules(model, {{"shared", "out"}});
  RecordingHooks hooks({"shared+out"});
  set_unit_hooks(&hooks);
  try {
    forward(model, torch::randn({4, 8}));
    ADD_FAILURE() << "forward ran";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("ran twice in one call of the unit"), std::string::npos)
        << e.what();
  }
  abandon_checkpointed_calls();
}

TEST_P(Instrumentation, OtherInstancesOfAUnitClassFireNothing) {
  auto model = load_instrumented("tied_lm.pt", {"layers.0"});
  for (int step = 0; step < 2; ++step) {
    const at::Tensor out = forward(model, tokens());
    EXPECT_EQ(hooks_->take(), (Events{"pre_forward layers.0", "post_forward layers.0"}));
    backward(out);
    EXPECT_EQ(hooks_->take(), Events{"pre_backward layers.0"});
  }
  const auto layers = model.attr("layers").toModule();
  EXPECT_EQ(layers.attr("0").toModule().attr("_mfsdp_unit").toInt(), 0);
  EXPECT_EQ(layers.attr("1").toModule().attr("_mfsdp_unit").toInt(), -1);
  EXPECT_FALSE(model.hasattr("_mfsdp_unit"));
}

TEST_P(Instrumentation, ModuleCalledTwiceFiresOnEachCall) {
  auto model = load_instrumented("called_twice.pt", {"inp", "shared", "mid", "out"});
  const at::Tensor out = forward(model, torch::randn({4, 8}));
  EXPECT_EQ(hooks_->take(), (Events{"pre_forward inp", "post_forward inp", "pre_forward shared",
                                    "post_forward shared", "pre_forward mid", "post_forward mid",
                                    "pre_forward shared", "post_forward shared", "pre_forward out",
                                    "post_forward out"}));
  backward(out);
  EXPECT_EQ(hooks_->take(), (Events{"pre_backward out", "pre_backward shared", "pre_backward mid",
                                    "pre_backward shared", "pre_backward inp"}));
}

TEST_P(Instrumentation, RootUnitEnclosesTheOtherUnits) {
  auto model = load_instrumented("two_roots.pt", {"<root>", "encoder", "decoder"});
  const at::Tensor out = forward(model, torch::randn({4, 16}));
  EXPECT_EQ(hooks_->take(),
            (Events{"pre_forward <root>", "pre_forward encoder", "post_forward encoder",
                    "pre_forward decoder", "post_forward decoder", "post_forward <root>"}));
  backward(out);
  EXPECT_EQ(hooks_->take(),
            (Events{"pre_backward <root>", "pre_backward decoder", "pre_backward encoder"}));
  EXPECT_EQ(model.attr("_mfsdp_unit").toInt(), 0);
}

TEST_P(Instrumentation, ConditionalUnitsFireOnlyWhenCalled) {
  auto model = load_instrumented("conditional.pt", {"branch_a", "branch_b", "post", "refine"});
  const at::Tensor x = torch::randn({4, 8});
  // branch_a and branch_b share one class; only the branch taken may fire.
  auto reference = torch::jit::load(fixture("conditional.pt"));
  auto pre = reference.attr("pre").toModule();
  const std::string branch = forward(pre, x).sum().item<float>() > 0 ? "branch_a" : "branch_b";
  const at::Tensor out = forward(model, x);
  EXPECT_EQ(hooks_->take(),
            (Events{"pre_forward " + branch, "post_forward " + branch, "pre_forward post",
                    "post_forward post", "pre_forward refine", "post_forward refine"}));
  backward(out);
  EXPECT_EQ(hooks_->take(),
            (Events{"pre_backward refine", "pre_backward post", "pre_backward " + branch}));
}

struct Case {
  std::string model;
  std::vector<std::string> units;
  std::function<at::Tensor()> input;
};

TEST_P(Instrumentation, OutputsAndGradientsEqualTheUninstrumentedModel) {
  const std::vector<Case> cases = {
      {"tied_lm.pt", {"wte", "layers.0", "layers.1", "lm_head"}, tokens},
      {"reordered.pt", {"stem", "blocks.0", "blocks.1", "blocks.2", "head"}, features8},
      {"called_twice.pt", {"shared"}, features8},
      {"two_roots.pt", {"<root>", "encoder", "decoder"}, features16},
      {"conditional.pt", {"branch_a", "branch_b", "post", "refine"}, features8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model);
    auto reference = torch::jit::load(fixture(c.model));
    auto model = load_instrumented(c.model, c.units);
    for (int step = 0; step < 3; ++step) {
      const at::Tensor x = c.input();
      const at::Tensor expected = forward(reference, x);
      const at::Tensor out = forward(model, x);
      EXPECT_TRUE(torch::equal(out, expected)) << "step " << step;
      backward(expected);
      backward(out);
      const auto expected_params = reference.named_parameters();
      const auto params = model.named_parameters();
      ASSERT_EQ(params.size(), expected_params.size());
      for (auto e = expected_params.begin(), p = params.begin(); p != params.end(); ++e, ++p) {
        EXPECT_TRUE(same_grad((*p).value, (*e).value)) << (*p).name << ", step " << step;
      }
    }
    const auto expected_buffers = reference.named_buffers();  // BatchNorm running statistics
    const auto buffers = model.named_buffers();
    for (auto e = expected_buffers.begin(), b = buffers.begin(); b != buffers.end(); ++e, ++b) {
      EXPECT_TRUE(torch::equal((*b).value, (*e).value)) << (*b).name;
    }
  }
}

TEST_P(Instrumentation, RefusesAModelWhoseForwardHasRun) {
  auto model = torch::jit::load(fixture("tied_lm.pt"));
  forward(model, tokens());
  const auto graph = torch::jit::toGraphFunction(model.get_method("forward").function()).graph();
  const std::string before = graph->toString();
  EXPECT_MFSDP_ERROR(instrument_units(model, {"layers.0"}), ExitCode::kPlanning,
                     "cannot instrument units: the model's forward has already run, and "
                     "TorchScript keeps the graph it compiled then; call instrument_units "
                     "right after torch::jit::load, before the first forward");
  EXPECT_FALSE(model.attr("layers").toModule().attr("0").toModule().hasattr("_mfsdp_unit"));
  EXPECT_EQ(graph->toString(), before);  // the probe left no mark
  forward(model, tokens());
}

// encoder and decoder share one class, so one graph: running either compiles it.
TEST_P(Instrumentation, RefusesAUnitClassWhoseForwardHasRun) {
  auto model = torch::jit::load(fixture("two_roots.pt"));
  auto encoder = model.attr("encoder").toModule();
  forward(encoder, torch::randn({4, 16}));
  EXPECT_MFSDP_ERROR(instrument_units(model, {"decoder"}), ExitCode::kPlanning,
                     "cannot instrument units: the forward of SmallMLP (the class of unit "
                     "'decoder') has already run, and TorchScript keeps the graph it compiled "
                     "then; call instrument_units right after torch::jit::load, before the "
                     "first forward");
  EXPECT_FALSE(encoder.hasattr("_mfsdp_unit"));
}

// Modules built from TorchScript source, sharing one compilation unit.
class SourceModules : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
  void TearDown() override { set_unit_hooks(nullptr); }

  torch::jit::Module make(
      const std::string& name, const std::string& source,
      const std::vector<std::pair<std::string, torch::jit::Module>>& children = {}) {
    torch::jit::Module m(c10::QualifiedName(name), cu_);
    m.register_parameter("w", torch::randn({4}).requires_grad_(), /*is_buffer=*/false);
    for (const auto& [child_name, child] : children) m.register_module(child_name, child);
    m.define(source);
    return m;
  }

  std::shared_ptr<torch::jit::CompilationUnit> cu_ =
      std::make_shared<torch::jit::CompilationUnit>();
};

std::string returning(const std::string& type, const std::string& value) {
  return "def forward(self, x: Tensor) -> " + type + ":\n  return " + value + "\n";
}

TEST_F(SourceModules, RejectsOutputsItCannotWrapAndChangesNothing) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"Dict[str, Tensor]", "{'y': x}"},
      {"Optional[Tensor]", "x if bool(x.sum() > 0) else None"},
      {"Tuple[Tensor, Tuple[Tensor, int]]", "(x, (x, 1))"},
      {"List[Optional[Tensor]]", "[None, x]"},
  };
  for (const auto& [type, value] : bad) {
    SCOPED_TRACE(type);
    cu_ = std::make_shared<torch::jit::CompilationUnit>();
    auto good = make("Good", returning("Tensor", "x * self.w"));
    auto block = make("Block", returning(type, value));
    auto model = make(
        "Net",
        "def forward(self, x: Tensor):\n  return self.good.forward(x), self.block.forward(x)\n",
        {{"good", good}, {"block", block}});
    EXPECT_MFSDP_ERROR(instrument_units(model, {"good", "block"}), ExitCode::kPlanning,
                       "unit 'block' (Block) returns " + type +
                           "; mfsdp can only hook Tensor, tuples and lists of Tensor outputs");
    EXPECT_FALSE(good.hasattr("_mfsdp_unit"));
    const auto graph = torch::jit::toGraphFunction(good.get_method("forward").function()).graph();
    EXPECT_EQ(graph->toString().find("mfsdp::"), std::string::npos);
  }
}

TEST_F(SourceModules, WrapsTupleListAndTensorFreeOutputs) {
  auto build = [&] {
    torch::manual_seed(0);
    cu_ = std::make_shared<torch::jit::CompilationUnit>();
    auto pair =
        make("Pair", returning("Tuple[Tensor, int, Tensor]", "(x * self.w, 3, x + self.w)"));
    auto many = make("Many", returning("List[Tensor]", "[x * self.w, x - self.w]"));
    auto count = make("Count", "def forward(self, n: int) -> int:\n  return n + 1\n");
    return make("Net",
                "def forward(self, x: Tensor) -> Tensor:\n"
                "  a, k, b = self.pair.forward(x)\n"
                "  l = self.many.forward(a)\n"
                "  m = self.count.forward(k)\n"
                "  return (l[0] + l[1] + b) * m\n",
                {{"pair", pair}, {"many", many}, {"count", count}});
  };
  auto reference = build();
  auto model = build();
  instrument_units(model, {"pair", "many", "count"});
  RecordingHooks hooks({"pair", "many", "count"});
  set_unit_hooks(&hooks);

  const at::Tensor x = torch::randn({4});
  const at::Tensor expected = forward(reference, x);
  const at::Tensor out = forward(model, x);
  EXPECT_TRUE(torch::equal(out, expected));
  EXPECT_EQ(hooks.take(), (Events{"pre_forward pair", "post_forward pair", "pre_forward many",
                                  "post_forward many", "pre_forward count", "post_forward count"}));
  backward(expected);
  backward(out);
  // One pre_backward for pair although both of its tensors carry gradient; none for count.
  EXPECT_EQ(hooks.take(), (Events{"pre_backward many", "pre_backward pair"}));
  for (const std::string unit : {"pair", "many"}) {
    const auto w = model.attr(unit).toModule().attr("w").toTensor();
    const auto w_expected = reference.attr(unit).toModule().attr("w").toTensor();
    EXPECT_TRUE(w.grad().defined() && same_grad(w, w_expected)) << unit;
  }
}

TEST_F(SourceModules, InPlaceOpsOnUnitOutputsBehaveAsWithoutInstrumentation) {
  auto build = [&] {
    torch::manual_seed(0);
    cu_ = std::make_shared<torch::jit::CompilationUnit>();
    auto block = make("Block", returning("Tensor", "x * self.w"));
    return make("Net",
                "def forward(self, x: Tensor) -> Tensor:\n"
                "  y = self.block.forward(x)\n"
                "  y.relu_()\n"
                "  return y * self.w\n",
                {{"block", block}});
  };
  auto reference = build();
  auto model = build();
  instrument_units(model, {"block"});
  RecordingHooks hooks({"block"});
  set_unit_hooks(&hooks);
  const at::Tensor x = torch::randn({4});
  const at::Tensor expected = forward(reference, x);
  const at::Tensor out = forward(model, x);
  EXPECT_TRUE(torch::equal(out, expected));
  backward(expected);
  backward(out);
  EXPECT_TRUE(same_grad(model.attr("w").toTensor(), reference.attr("w").toTensor()));
  EXPECT_TRUE(same_grad(model.attr("block").toModule().attr("w").toTensor(),
                        reference.attr("block").toModule().attr("w").toTensor()));
}

// The unit gets views of its inputs; autograd forbids changing those in place rather than let
// the caller's tensor change without its gradient knowing.
TEST_F(SourceModules, InPlaceChangeOfAUnitInputIsAnAutogradError) {
  auto block = make("Block",
                    "def forward(self, x: Tensor) -> Tensor:\n"
                    "  x.mul_(2.0)\n"
                    "  return x * self.w\n");
  auto model =
      make("Net", returning("Tensor", "self.block.forward(x * self.w)"), {{"block", block}});
  instrument_units(model, {"block"});
  RecordingHooks hooks({"block"});
  set_unit_hooks(&hooks);
  try {
    forward(model, torch::randn({4}));
    ADD_FAILURE() << "expected an autograd error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("is a view and is being modified inplace"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(SourceModules, FiresInInferenceModeAndWithoutHooksOnlyPassesThrough) {
  auto block = make("Block", returning("Tensor", "x * self.w"));
  auto model = make("Net", returning("Tensor", "self.block.forward(x)"), {{"block", block}});
  instrument_units(model, {"block"});
  const at::Tensor x = torch::randn({4});
  const at::Tensor expected = x * block.attr("w").toTensor();
  EXPECT_TRUE(torch::equal(forward(model, x), expected));  // no hooks installed

  RecordingHooks hooks({"block"});
  EXPECT_EQ(set_unit_hooks(&hooks), nullptr);
  {
    c10::InferenceMode inference;
    EXPECT_TRUE(torch::equal(forward(model, x), expected));
  }
  EXPECT_EQ(hooks.take(), (Events{"pre_forward block", "post_forward block"}));
  EXPECT_EQ(set_unit_hooks(nullptr), &hooks);
}

TEST(InstrumentUnits, RewritesEachUnitClassOnce) {
  auto model = torch::jit::load(fixture("reordered.pt"));
  instrument_units(model, {"blocks.0", "blocks.1", "blocks.2"});
  const auto& fn =
      model.attr("blocks").toModule().attr("1").toModule().get_method("forward").function();
  const std::string graph = torch::jit::toGraphFunction(fn).graph()->toString();
  auto count = [&](const std::string& text) {
    size_t n = 0;
    for (size_t at = graph.find(text); at != std::string::npos; at = graph.find(text, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("mfsdp::unit_enter"), 1u);
  EXPECT_EQ(count("mfsdp::unit_exit"), 1u);
  EXPECT_EQ(count("prim::GetAttr[name=\"_mfsdp_unit\"]"), 1u);
}

TEST(InstrumentUnits, RefusesToInstrumentTwice) {
  auto model = torch::jit::load(fixture("tied_lm.pt"));
  instrument_units(model, {"layers.0"});
  EXPECT_MFSDP_ERROR(instrument_units(model, {"layers.1"}), ExitCode::kPlanning,
                     "the model is already instrumented (module 'layers.0' has _mfsdp_unit); "
                     "instrument a freshly loaded model once");
}

TEST(InstrumentUnits, RejectsPathsThatNameNoHookableModule) {
  auto model = torch::jit::load(fixture("tied_lm.pt"));
  EXPECT_MFSDP_ERROR(instrument_units(model, {"layers.7"}), ExitCode::kPlanning,
                     "unit 'layers.7' is not a module of the model; use a fully-qualified "
                     "module path such as 'layers.0'");
  EXPECT_MFSDP_ERROR(instrument_units(model, {"wte.weight"}), ExitCode::kPlanning,
                     "unit 'wte.weight' is not a module of the model");
  EXPECT_MFSDP_ERROR(instrument_units(model, {"layers"}), ExitCode::kPlanning,
                     "unit 'layers' (ModuleList) has no forward method, so mfsdp cannot hook "
                     "it; make the modules it holds units instead");
  EXPECT_MFSDP_ERROR(instrument_units(model, {"<root>", ""}), ExitCode::kPlanning,
                     "units '<root>' and '<root>' are the same module instance; list it once");
  EXPECT_FALSE(model.hasattr("_mfsdp_unit"));
}

}  // namespace
}  // namespace mfsdp::planner
