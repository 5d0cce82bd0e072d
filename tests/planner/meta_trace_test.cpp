// The shape-only trace (`--trace-device meta`): on every fixture it sees the events and counts
// the bytes the CPU trace does, it counts each unit's FLOPs as a hand count does, and it says
// what it cannot run.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>

#include "planner/trace_input.h"
#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

using Names = std::vector<std::string>;

std::vector<TraceInput> inputs(const Names& specs) {
  std::vector<TraceInput> out;
  for (const auto& spec : specs) out.push_back(parse_trace_input(spec));
  return out;
}

std::string example(const std::string& name) {
  return std::string(MFSDP_SOURCE_DIR) + "/examples/" + name;
}

struct Case {
  std::string model;
  Names units;
  Names specs;
  std::optional<std::string> param_dtype;
  std::vector<bool> checkpointed;
  // The most the CPU's peaks may exceed the meta trace's: temporaries the CPU kernels make
  // inside themselves, which meta kernels do not (a 0-d cast of a Python scalar; bfloat16
  // matmuls computed through float32 copies). Every live count is exact.
  int64_t cpu_temporaries = 0;
};

std::string describe(const Case& c) {
  std::string out = c.model;
  for (const auto& u : c.units) out += " '" + u + "'";
  if (c.param_dtype) out += " " + *c.param_dtype;
  for (bool b : c.checkpointed) out += b ? " ckpt" : " -";
  return out;
}

void expect_same_bytes(TracedBytes cpu, TracedBytes meta, int64_t cpu_temporaries,
                       const std::string& what) {
  EXPECT_EQ(cpu.live, meta.live) << what << " live";
  if (cpu_temporaries == 0) {
    EXPECT_EQ(cpu.peak, meta.peak) << what << " peak";
  } else {
    EXPECT_GE(cpu.peak, meta.peak) << what << " peak";
    EXPECT_LE(cpu.peak - meta.peak, cpu_temporaries) << what << " peak";
  }
}

void expect_same_bytes(const std::vector<TracedBytes>& cpu, const std::vector<TracedBytes>& meta,
                       int64_t cpu_temporaries, const std::string& what) {
  ASSERT_EQ(cpu.size(), meta.size()) << what;
  for (size_t i = 0; i < cpu.size(); ++i) {
    expect_same_bytes(cpu[i], meta[i], cpu_temporaries, what + " " + std::to_string(i));
  }
}

std::vector<Case> fixture_cases() {
  const Names gpt = {"", "layers.0", "layers.1"};
  return {
      {fixture("tied_lm.pt"), gpt, {"2x16:int64"}},
      {fixture("tied_lm.pt"), gpt, {"2x16:int64"}, std::nullopt, {false, true, true}},
      {fixture("tied_lm.pt"), gpt, {"2x16:int64"}, "bfloat16", {}, 40 << 10},
      {fixture("untied_lm.pt"), gpt, {"3x8:int64"}},
      {fixture("functional_head.pt"), gpt, {"2x16:int64"}},
      {fixture("dropout_lm.pt"), gpt, {"2x16:int64"}, std::nullopt, {false, true, false}},
      {fixture("looped_lm.pt"), {"", "block"}, {"2x16:int64"}},
      {fixture("reordered.pt"), {"", "head", "blocks.0", "blocks.1", "blocks.2", "stem"}, {"4x8"}},
      {fixture("called_twice.pt"), {"inp", "shared", "mid", "out"}, {"4x8"}},
      {fixture("mixed.pt"), {"embed", "proj", "proj64", "bn", ""}, {"3x7:int64"}, {}, {}, 64},
      {fixture("constant_loops.pt"), {"inp", "a", "b", "c", "out"}, {"4x8"}, {}, {}, 4},
      {fixture("while_loop.pt"), {"inp", "step", "out"}, {"3x8"}},
      {fixture("two_roots.pt"), {"encoder", "decoder"}, {"4x16"}},
      {example("bytegpt.pt"), {"", "layers.0", "layers.1", "layers.2", "layers.3"}, {"2x64:int64"}},
  };
}

TEST(MetaTrace, CountsTheBytesAndEventsOfTheCpuTraceOnEveryFixture) {
  for (const Case& c : fixture_cases()) {
    const TracedRun cpu =
        trace_units(c.model, c.units, inputs(c.specs), c.param_dtype, c.checkpointed);
    const TracedRun meta = trace_units(c.model, c.units, inputs(c.specs), c.param_dtype,
                                       c.checkpointed, 1, TraceDevice::kMeta);
    const std::string what = describe(c);
    EXPECT_EQ(meta.device, TraceDevice::kMeta);
    ASSERT_EQ(cpu.forward.size(), meta.forward.size()) << what;
    for (size_t i = 0; i < cpu.forward.size(); ++i) {
      EXPECT_EQ(cpu.forward[i].enter, meta.forward[i].enter) << what;
      EXPECT_EQ(cpu.forward[i].unit, meta.forward[i].unit) << what;
    }
    EXPECT_EQ(cpu.backward, meta.backward) << what;
    expect_same_bytes(cpu.forward_bytes, meta.forward_bytes, c.cpu_temporaries, what + " forward");
    expect_same_bytes(cpu.backward_bytes, meta.backward_bytes, c.cpu_temporaries,
                      what + " backward");
    expect_same_bytes(cpu.loss_bytes, meta.loss_bytes, c.cpu_temporaries, what + " loss");
    EXPECT_EQ(cpu.output_bytes, meta.output_bytes) << what;
    EXPECT_EQ(cpu.loss, meta.loss) << what;
  }
}

// A chain of units u0, u1, u2, each `torch.mm(x, self.w)` with w [k, k], on x [b, k]: forward
// 2bk² FLOPs per unit; backward 2bk² for w's gradient and, past u0 (whose input needs none),
// 2bk² for x's; each mm reads its two operands and writes its product, and counts as one
// operator.
TEST(MetaTrace, CountsTheFlopsAndBytesOfEachUnitsProducts) {
  constexpr int64_t b = 4, k = 8, f = 4;
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module model(c10::QualifiedName("Chain"), cu);
  std::string calls = "x";
  for (int i = 0; i < 3; ++i) {
    torch::jit::Module child(c10::QualifiedName("Link" + std::to_string(i)), cu);
    child.register_parameter("w", torch::randn({k, k}).requires_grad_(), false);
    child.define("def forward(self, x):\n  return torch.mm(x, self.w)\n");
    model.register_module("u" + std::to_string(i), child);
    calls = "self.u" + std::to_string(i) + ".forward(" + calls + ")";
  }
  model.define("def forward(self, x):\n  return " + calls + "\n");
  const std::string path = (std::filesystem::path(::testing::TempDir()) / "mm_chain.pt").string();
  model.save(path);

  const TracedRun run = trace_units(path, {"u0", "u1", "u2"}, inputs({"4x8"}), std::nullopt, {}, 1,
                                    TraceDevice::kMeta);
  ASSERT_EQ(run.pre_forward_work.size(), 3u);
  for (int u = 0; u < 3; ++u) {
    SCOPED_TRACE("u" + std::to_string(u));
    EXPECT_EQ(run.pre_forward_work[u].matmul.flops, 2 * b * k * k);
    EXPECT_EQ(run.pre_forward_work[u].matmul.bytes, f * (b * k + k * k + b * k));
    EXPECT_EQ(run.pre_forward_work[u].matmul.ops, 1);
    EXPECT_EQ(run.post_forward_work[u].matmul.flops, 0);
    EXPECT_EQ(run.post_forward_work[u].matmul.ops, 0);
    const int64_t products = u == 0 ? 1 : 2;
    EXPECT_EQ(run.backward_work[u].matmul.flops, products * 2 * b * k * k);
    EXPECT_EQ(run.backward_work[u].matmul.ops, products);
    EXPECT_EQ(run.pre_forward_work[u].attention.flops + run.backward_work[u].attention.flops, 0);
  }
  // The loss (cross-entropy of [4, 8] logits) and its backward: no products, some bytes.
  EXPECT_EQ(run.loss_work.matmul.flops, 0);
  EXPECT_GT(run.loss_work.elementwise.bytes, 0);
  EXPECT_EQ(run.loss, "cross_entropy");
}

// bytegpt's embedding lookups read the rows they return, not the whole table; its backward
// writes a gradient of the whole table.
TEST(MetaTrace, CountsAnEmbeddingByTheRowsItReads) {
  const TracedRun run =
      trace_units(example("bytegpt.pt"), {"", "layers.0", "layers.1", "layers.2", "layers.3"},
                  inputs({"2x64:int64"}), std::nullopt, {}, 1, TraceDevice::kMeta);
  const int64_t tokens = 2 * 64, d = 64, f = 4, vocab = 256, positions = 64;
  // Token and position lookups: the indices (int64) read, each row read and written.
  EXPECT_EQ(run.pre_forward_work[0].embedding.bytes,
            tokens * 8 + 2 * tokens * d * f + 64 * 8 + 2 * positions * d * f);
  // Backward writes both tables' gradients, reading the indices and the rows' gradients. It
  // runs after the last unit's pre_backward, in whichever unit's segment that opened.
  int64_t backward = 0;
  for (const PhaseWork& w : run.backward_work) backward += w.embedding.bytes;
  EXPECT_EQ(backward, tokens * 8 + tokens * d * f + vocab * d * f + 64 * 8 + positions * d * f +
                          positions * d * f);
}

TEST(MetaTrace, RefusesAModelThatReadsValues) {
  EXPECT_MFSDP_ERROR(trace_units(fixture("conditional.pt"), {"pre", "post"}, inputs({"4x8"}),
                                 std::nullopt, {}, 1, TraceDevice::kMeta),
                     ExitCode::kModel, "reads a tensor's value");
}

TEST(MetaTrace, TracesASkeleton) {
  const std::string skeleton = fixture("safetensors/tied_lm_skeleton.pt");
  const Names units = {"", "layers.0", "layers.1"};
  EXPECT_MFSDP_ERROR(trace_units(skeleton, units, inputs({"2x16:int64"})), ExitCode::kUsage,
                     "--trace-device meta");
  const TracedRun meta =
      trace_units(skeleton, units, inputs({"2x16:int64"}), std::nullopt, {}, 1, TraceDevice::kMeta);
  const TracedRun cpu = trace_units(fixture("tied_lm.pt"), units, inputs({"2x16:int64"}));
  expect_same_bytes(cpu.forward_bytes, meta.forward_bytes, 0, "forward");
  expect_same_bytes(cpu.backward_bytes, meta.backward_bytes, 0, "backward");
}

}  // namespace
}  // namespace mfsdp::planner
