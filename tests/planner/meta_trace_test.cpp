// The shape-only trace (`--trace-device meta`): on every fixture it sees the events and counts
// the bytes the CPU trace does, it counts each unit's FLOPs as a hand count does, and it says
// what it cannot run.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>

#include <torch/version.h>

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

// A model whose unit `attn` runs causal scaled-dot-product attention on h = x w viewed as
// [b, heads, l, e]: as LibTorch runs it (its math form: two batched products, the l x l scores
// and probabilities saved) and as a GPU's fused kernel does (--fused-attention: one operator
// each way, the output and a float32 log-sum-exp per row saved, half the scores computed
// under the causal mask, 5 products in backward).
TEST(MetaTrace, FusedAttentionSavesNoScoresAndSkipsTheMaskedHalf) {
  constexpr int64_t b = 2, heads = 2, l = 16, e = 8, f = 4;
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module model(c10::QualifiedName("AttnModel"), cu);
  torch::jit::Module attn(c10::QualifiedName("Attn"), cu);
#if TORCH_VERSION_MAJOR < 2
  attn.define(
      "def forward(self, h):\n"
      "  return torch._scaled_dot_product_attention(h, h, h, None, 0.0, False, True)[0]\n");
#else
  attn.define(
      "def forward(self, h):\n"
      "  return torch.scaled_dot_product_attention(h, h, h, None, 0.0, True)\n");
#endif
  model.register_module("attn", attn);
  model.register_parameter("w", torch::randn({e, e}).requires_grad_(), false);
  model.define(
      "def forward(self, x):\n"
      "  h = torch.matmul(x, self.w).view([" +
      std::to_string(b) + ", " + std::to_string(heads) + ", " + std::to_string(l) + ", " +
      std::to_string(e) +
      "])\n"
      "  return self.attn.forward(h)\n");
  const std::string path = (std::filesystem::path(::testing::TempDir()) / "attn.pt").string();
  model.save(path);
  const std::string spec =
      std::to_string(b * heads) + "x" + std::to_string(l) + "x" + std::to_string(e);
  const Names units = {"", "attn"};
  const TracedRun math =
      trace_units(path, units, inputs({spec}), std::nullopt, {}, 1, TraceDevice::kMeta);
  const TracedRun fused = trace_units(path, units, inputs({spec}), std::nullopt, {}, 1,
                                      TraceDevice::kMeta, Attention::kFused);
  EXPECT_EQ(math.attention, Attention::kAsTraced);
  EXPECT_EQ(fused.attention, Attention::kFused);

  // Bytes the unit leaves alive: forward events are root enter, attn enter, attn exit, root exit.
  ASSERT_EQ(fused.forward_bytes.size(), 4u);
  ASSERT_EQ(math.forward_bytes.size(), 4u);
  const auto kept = [](const TracedRun& run) {
    return run.forward_bytes[2].live - run.forward_bytes[1].live;
  };
  const int64_t out = b * heads * l * e * f, logsumexp = b * heads * l * f;
  EXPECT_EQ(kept(fused), out + logsumexp);
  EXPECT_GE(kept(math), out + b * heads * l * l * f);  // and the probabilities, at least

  const int64_t scores = b * heads * l * l;
  const PhaseWork& forward = fused.pre_forward_work[1];
  EXPECT_EQ(forward.attention.flops, 2 * scores * (e + e) / 2);
  EXPECT_EQ(forward.attention.ops, 1);
  EXPECT_EQ(forward.attention.bytes, 3 * out + out);  // q, k, v read (h thrice); out written
  EXPECT_EQ(forward.matmul.flops, 0);
  // attn's backward segment runs to the end of backward, so it holds the root's product's
  // backward too: w's gradient, 2 (b heads l) e² (x needs none).
  const int64_t root_product = 2 * (b * heads * l) * e * e;
  const PhaseWork& backward = fused.backward_work[1];
  EXPECT_EQ(backward.attention.flops, 2 * scores * (3 * e + 2 * e) / 2);
  EXPECT_EQ(backward.attention.ops, 1);
  EXPECT_EQ(backward.matmul.flops, root_product);
  // As traced: the full scores forward; backward is the math form's products and softmax.
  EXPECT_EQ(math.pre_forward_work[1].attention.flops, 2 * scores * (e + e));
  EXPECT_EQ(math.backward_work[1].attention.ops, 0);
  EXPECT_EQ(math.backward_work[1].matmul.flops, root_product + 2 * scores * 2 * (e + e));

  EXPECT_MFSDP_ERROR(trace_units(path, units, inputs({spec}), std::nullopt, {}, 1,
                                 TraceDevice::kCpu, Attention::kFused),
                     ExitCode::kUsage, "--trace-device meta");
  // The kernel is gone again once the fused trace ended: a CPU trace runs attention itself.
  const TracedRun cpu = trace_units(path, units, inputs({spec}));
  EXPECT_EQ(cpu.forward_bytes[2].live - cpu.forward_bytes[1].live, kept(math));
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
