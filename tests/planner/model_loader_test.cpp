#include "planner/torchscript/model_loader.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

// The forward trace as "call X" / "read T" lines, only module calls and parameter reads.
std::vector<std::string> calls(const ModelIR& ir) {
  std::vector<std::string> out;
  for (const CallEvent& e : ir.trace) {
    if (e.kind == CallEvent::Kind::kEnter) {
      out.push_back(std::string("call ") + display_name(ir.modules[e.module].path) +
                    (e.under_if ? " [if]" : "") + (e.under_loop ? " [loop]" : ""));
    }
  }
  return out;
}

const TensorInfo& tensor(const ModelIR& ir, const std::string& name) {
  for (const auto& t : ir.tensors) {
    for (const auto& n : t.names) {
      if (n == name) return t;
    }
  }
  throw std::logic_error("no tensor " + name);
}

TEST(ModelLoader, TiedWeightIsOneTensorWithTwoNames) {
  const ModelIR ir = load_model(fixture("tied_lm.pt"));
  const TensorInfo& wte = tensor(ir, "wte.weight");
  EXPECT_EQ(wte.names, (std::vector<std::string>{"wte.weight", "lm_head.weight"}));
  EXPECT_EQ(wte.shape, (std::vector<int64_t>{256, 32}));
  EXPECT_EQ(ir.tensors.size(), 28u);
  EXPECT_EQ(ir.modules.size(), 26u);
}

TEST(ModelLoader, UntiedModelHasSeparateHead) {
  const ModelIR ir = load_model(fixture("untied_lm.pt"));
  EXPECT_EQ(tensor(ir, "lm_head.weight").names, std::vector<std::string>{"lm_head.weight"});
  EXPECT_EQ(ir.tensors.size(), 29u);
}

TEST(ModelLoader, ModuleTreeIsInDefinitionPreorderWithDemangledTypes) {
  const ModelIR ir = load_model(fixture("tied_lm.pt"));
  EXPECT_EQ(ir.modules[0].path, "");
  EXPECT_EQ(ir.modules[1].path, "wte");
  EXPECT_EQ(ir.modules[3].path, "layers");
  EXPECT_EQ(ir.modules[4].path, "layers.0");
  EXPECT_EQ(ir.modules[4].type, "__torch__.fixtures.Block");
  EXPECT_EQ(ir.modules[2].type, "__torch__.torch.nn.modules.sparse.Embedding");
  EXPECT_EQ(ir.modules[ir.modules[4].parent].path, "layers");
  EXPECT_EQ(ir.modules.back().path, "lm_head");
}

TEST(ModelLoader, TraceFollowsCallMethodsThroughSelfCalls) {
  const ModelIR ir = load_model(fixture("reordered.pt"));
  EXPECT_EQ(calls(ir),
            (std::vector<std::string>{"call <root>", "call stem", "call blocks.2",
                                      "call blocks.2.fc1", "call blocks.2.fc2", "call blocks.0",
                                      "call blocks.0.fc1", "call blocks.0.fc2", "call blocks.1",
                                      "call blocks.1.fc1", "call blocks.1.fc2", "call head"}));
}

TEST(ModelLoader, TraceRecordsEachCallOfASharedModule) {
  const ModelIR ir = load_model(fixture("called_twice.pt"));
  EXPECT_EQ(calls(ir),
            (std::vector<std::string>{"call <root>", "call inp", "call shared", "call shared.fc1",
                                      "call shared.fc2", "call mid", "call shared",
                                      "call shared.fc1", "call shared.fc2", "call out"}));
}

TEST(ModelLoader, TraceFlagsCallsUnderIfAndLoopButNotCalleeInternals) {
  const ModelIR ir = load_model(fixture("conditional.pt"));
  EXPECT_EQ(calls(ir), (std::vector<std::string>{
                           "call <root>", "call pre", "call branch_a [if]",
                           "call branch_a.fc1 [if]", "call branch_a.fc2 [if]", "call branch_b [if]",
                           "call branch_b.fc1 [if]", "call branch_b.fc2 [if]", "call post",
                           "call post.fc", "call post.bn", "call refine [loop]"}));
}

TEST(ModelLoader, FunctionalReadOfEmbeddingIsInTheRootsForward) {
  const ModelIR ir = load_model(fixture("functional_head.pt"));
  const CallEvent& last_read = ir.trace[ir.trace.size() - 2];
  ASSERT_EQ(last_read.kind, CallEvent::Kind::kRead);
  EXPECT_EQ(ir.tensors[last_read.tensor].names.front(), "wte.weight");
}

TEST(ModelLoader, KeepsDtypesFrozenFlagsAndBuffers) {
  const ModelIR ir = load_model(fixture("mixed.pt"));
  EXPECT_EQ(tensor(ir, "scale").dtype, "float16");
  EXPECT_TRUE(tensor(ir, "scale").requires_grad);
  EXPECT_FALSE(tensor(ir, "embed.weight").requires_grad);
  EXPECT_EQ(tensor(ir, "proj64.weight").dtype, "float64");
  EXPECT_FALSE(tensor(ir, "ids").is_parameter);
  EXPECT_EQ(tensor(ir, "ids").dtype, "int64");
  EXPECT_EQ(tensor(ir, "bn.num_batches_tracked").shape, std::vector<int64_t>{});
  EXPECT_EQ(ir.tensors[0].names.front(), "scale");  // a module's own tensors come first
}

TEST(ModelLoader, StructuralHashSeesTiesButNotWeights) {
  const std::string tied = structural_hash(load_model(fixture("tied_lm.pt")));
  EXPECT_EQ(tied.size(), 64u);
  EXPECT_EQ(tied, structural_hash(load_model(fixture("tied_lm.pt"))));
  EXPECT_NE(tied, structural_hash(load_model(fixture("untied_lm.pt"))));
}

TEST(ModelLoader, MissingFileIsOneClearLine) {
  EXPECT_MFSDP_ERROR(load_model("/nonexistent/model.pt"), ExitCode::kModel,
                     "/nonexistent/model.pt: cannot open the model file");
}

TEST(ModelLoader, EmptyFileIsRefused) {
  const std::string path = ::testing::TempDir() + "/empty.pt";
  std::ofstream(path).close();
  EXPECT_MFSDP_ERROR(load_model(path), ExitCode::kModel, "the model file is empty");
}

TEST(ModelLoader, DirectoryIsNamedAsOne) {
  const std::string path = ::testing::TempDir() + "/some_dir.pt";
  std::filesystem::create_directories(path);
  EXPECT_MFSDP_ERROR(load_model(path), ExitCode::kModel,
                     path + ": is a directory, not a model file");
}

TEST(ModelLoader, TextFileIsNotATorchScriptArchive) {
  const std::string path = ::testing::TempDir() + "/text.pt";
  std::ofstream(path) << "def forward(self, x): return x\n";
  EXPECT_MFSDP_ERROR(load_model(path), ExitCode::kModel, "not a TorchScript archive, or truncated");
}

TEST(ModelLoader, ZipWithoutTorchScriptIsRefused) {
  EXPECT_MFSDP_ERROR(load_model(fixture("bad/not_torchscript.zip")), ExitCode::kModel,
                     "not_torchscript.zip: not a TorchScript model");
}

TEST(ModelLoader, TruncatedArchiveIsRefused) {
  EXPECT_MFSDP_ERROR(load_model(fixture("bad/truncated.pt")), ExitCode::kModel,
                     "truncated.pt: not a TorchScript archive, or truncated");
}

TEST(ModelLoader, ModuleWithoutForwardIsRefused) {
  EXPECT_MFSDP_ERROR(load_model(fixture("bad/no_forward.pt")), ExitCode::kModel,
                     "no_forward.pt: the module has no forward method");
}

}  // namespace
}  // namespace mfsdp::planner
