// Starting a skeleton (a model file with no values) or a model from other weights: by --init's
// rule, from safetensors under other names through --name-map, or from a checkpoint with
// --resume (docs/large-models.md). References are runs from TorchScript files Python wrote
// (tests/fixtures/safetensors/make_init_fixtures.py), not from mfsdp.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "safetensors/safetensors.h"
#include "tests/cli/cli_test_support.h"
#include "tests/run/metrics_losses.h"
#include "tests/run/tied_runs.h"

namespace mfsdp::testing {
namespace {

namespace fs = std::filesystem;

const std::string kFullModel = "tests/fixtures/tied_lm.pt";
const std::string kChangedFile = "tests/fixtures/safetensors/tied_lm_changed.pt";
const std::string kChangedTensors = "tests/fixtures/safetensors/tied_lm_changed.safetensors";
const std::string kSkeletonFile = "tests/fixtures/safetensors/tied_lm_skeleton.pt";

// A run of `steps` steps writing fresh metrics to temp_path(name + ".jsonl").
std::vector<std::string> skeleton_run(const std::string& plan, const std::string& name,
                                      int steps = 4) {
  const std::string metrics = temp_path(name + ".jsonl");
  fs::remove(metrics);
  return tied_run(plan, metrics, steps);
}

std::vector<std::string> plus(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// --init normal:0.02: the skeleton and the full model file start from the same values (the
// file's are not read), which are small: the first loss is near log(vocabulary).
TEST(SkeletonStart, InitTrainsTheSkeletonExactlyLikeTheFullFileWithTheSameRule) {
  const RunResult full = mfsdp(plus(skeleton_run(tied_plan(kFullModel, "rule_full"), "rule_full"),
                                    {"--init", "normal:0.02"}));
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const RunResult skeleton =
      mfsdp(plus(skeleton_run(tied_plan(kSkeletonFile, "rule_skeleton"), "rule_skeleton"),
                 {"--init", "normal:0.02"}));
  ASSERT_EQ(skeleton.exit_code, 0) << skeleton.err;
  EXPECT_NE(skeleton.out.find("[rank 0] mfsdp run: initial weights from normal:0.02 with seed 0: "
                              "10 weight(s) from normal(0, 0.02), 13 bias(es) zeros, 5 1-D "
                              "weight(s) ones\n"),
            std::string::npos)
      << skeleton.out;
  const auto losses = rank0_losses(temp_path("rule_skeleton.jsonl"));
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_EQ(rank0_losses(temp_path("rule_full.jsonl")), losses);
  EXPECT_NEAR(losses.at(1), std::log(256.0), 0.05);
  // The model file's own values train otherwise; another seed starts elsewhere.
  ASSERT_EQ(mfsdp(skeleton_run(tied_plan(kFullModel, "rule_own"), "rule_own")).exit_code, 0);
  EXPECT_NE(rank0_losses(temp_path("rule_own.jsonl")), losses);
  const RunResult reseeded =
      mfsdp(plus(skeleton_run(tied_plan(kSkeletonFile, "rule_seed"), "rule_seed"),
                 {"--init", "normal:0.02", "--seed", "1"}));
  ASSERT_EQ(reseeded.exit_code, 0) << reseeded.err;
  EXPECT_NE(rank0_losses(temp_path("rule_seed.jsonl")).at(1), losses.at(1));
}

TEST(SkeletonStart, ConflictingOrMisspelledWeightSourcesAreOneLineWithExitTwo) {
  const std::string plan = tied_plan(kSkeletonFile, "sources");
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--init", "normal:0.02", "--init-from", kChangedTensors},
       "mfsdp: error: --init-from and --init both give the initial weights; pass one\n"},
      {{"--init", "normal:0.02", "--name-map", "examples/name-maps/hf-gpt2.json"},
       "mfsdp: error: --name-map renames the tensors of --init-from WEIGHTS; pass both\n"},
      {{"--init", "xavier"},
       "mfsdp: error: --init xavier: expected normal:STD with STD a number above 0, e.g. --init "
       "normal:0.02 (docs/large-models.md#initialiser)\n"},
  };
  for (const auto& [flags, message] : cases) {
    SCOPED_TRACE(message);
    const RunResult run = mfsdp(plus(skeleton_run(plan, "sources"), flags));
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_NE(run.err.find(message), std::string::npos) << run.err;
    EXPECT_EQ(run.out.find("step 1/"), std::string::npos) << run.out;
  }
}

// A skeleton resumes from an mfsdp checkpoint with no other source: shards, buffers and
// optimizer come from it, and training goes on exactly as an uninterrupted run does. A first
// launch's --init-from stays on the command line of a restart and is not read again.
TEST(SkeletonStart, ASkeletonResumesFromACheckpointExactlyLikeAnUninterruptedRun) {
  const RunResult straight =
      mfsdp(skeleton_run(tied_plan(kChangedFile, "resume_straight"), "resume_straight"));
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  const std::string plan = tied_plan(kSkeletonFile, "resume_skeleton");
  const std::string dir = temp_path("resume_skeleton_ckpt");
  fs::remove_all(dir);
  const RunResult first = mfsdp(plus(skeleton_run(plan, "resume_first", 2),
                                     {"--init-from", kChangedTensors, "--checkpoint-dir", dir}));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const RunResult resumed =
      mfsdp(plus(skeleton_run(plan, "resume_second"), {"--checkpoint-dir", dir, "--resume"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resumed from " + dir + "/step-00000002"), std::string::npos)
      << resumed.out;
  const RunResult again =
      mfsdp(plus(skeleton_run(plan, "resume_third", 5),
                 {"--checkpoint-dir", dir, "--resume", "--init-from", kChangedTensors}));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("[rank 0] mfsdp run: initial weights from the checkpoint (--init-from "
                           "and --init are for a start without one)\n"),
            std::string::npos)
      << again.out;
  const auto expected = rank0_losses(temp_path("resume_straight.jsonl"));
  ASSERT_EQ(expected.size(), 4u);
  auto got = rank0_losses(temp_path("resume_first.jsonl"));
  const auto second = rank0_losses(temp_path("resume_second.jsonl"));
  got.insert(second.begin(), second.end());
  EXPECT_EQ(got, expected);
  // With no checkpoint to resume the skeleton still needs a source.
  const std::string empty = temp_path("resume_skeleton_empty");
  fs::remove_all(empty);
  const RunResult none =
      mfsdp(plus(skeleton_run(plan, "resume_none"), {"--checkpoint-dir", empty, "--resume"}));
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_NE(none.err.find("is a skeleton: its tensors were saved from the meta device"),
            std::string::npos)
      << none.err;
}

// Weights in the layout of Hugging Face's GPT-2 checkpoints (h.N.ln_1, attn.c_attn, ...; the
// four matrices of a block stored transposed, as GPT-2's Conv1D keeps them; a causal-mask
// buffer per block the model does not have): the example map examples/name-maps/hf-gpt2.json
// reads them into the model, which then trains exactly like the TorchScript file of those
// weights.
TEST(SkeletonStart, ANameMapRenamesTransposesAndSkipsToTrainLikeTheModelFile) {
  const safetensors::Checkpoint source(kRepo + "/" + kChangedTensors);
  const std::string dir = temp_path("renamed_weights");
  fs::remove_all(dir);
  auto renamed = [](std::string name) {  // the model's name -> GPT-2's
    if (name.rfind("layers.", 0) != 0) return name;
    name = "h." + name.substr(7);
    for (const auto& [ours, theirs] : {std::pair<std::string, std::string>{".ln1.", ".ln_1."},
                                       {".ln2.", ".ln_2."},
                                       {".attn.qkv.", ".attn.c_attn."},
                                       {".attn.proj.", ".attn.c_proj."},
                                       {".mlp.fc.", ".mlp.c_fc."},
                                       {".mlp.proj.", ".mlp.c_proj."}}) {
      const size_t at = name.find(ours);
      if (at != std::string::npos) name.replace(at, ours.size(), theirs);
    }
    return name;
  };
  auto transposed = [](const std::string& name, const safetensors::TensorInfo& info) {
    return name.rfind("layers.", 0) == 0 && info.shape.size() == 2;
  };
  {
    safetensors::ShardedWriter writer(dir, 40 * 1000);
    for (const auto& [name, entry] : source.tensors()) {
      std::vector<int64_t> shape = entry.info->shape;
      if (transposed(name, *entry.info)) std::swap(shape[0], shape[1]);
      writer.declare(renamed(name), entry.info->dtype, shape);
    }
    for (const char* mask : {"h.0.attn.bias", "h.1.attn.bias"}) {
      writer.declare(mask, safetensors::Dtype::kF32, {1, 1, 2, 2});
    }
    for (const auto& [name, entry] : source.tensors()) {
      const auto* values = reinterpret_cast<const float*>(entry.file->data(*entry.info));
      std::vector<float> out(values, values + entry.info->byte_size() / 4);
      if (transposed(name, *entry.info)) {
        const int64_t rows = entry.info->shape[0], cols = entry.info->shape[1];
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = values[r * cols + c];
        }
      }
      writer.write(renamed(name), out.data(), out.size() * 4);
    }
    const float mask[4] = {1, 0, 1, 1};
    for (const char* name : {"h.0.attn.bias", "h.1.attn.bias"}) {
      writer.write(name, mask, sizeof mask);
    }
    writer.finish();
  }
  const std::string map = "examples/name-maps/hf-gpt2.json";
  const RunResult reference =
      mfsdp(skeleton_run(tied_plan(kChangedFile, "renamed_reference"), "renamed_reference"));
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const std::string plan = tied_plan(kSkeletonFile, "renamed");
  const RunResult run =
      mfsdp(plus(skeleton_run(plan, "renamed"), {"--init-from", dir, "--name-map", map}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("[rank 0] mfsdp run: initial weights from " + dir +
                         ": 28 parameter(s) renamed by " + map +
                         " (8 transposed), 2 tensor(s) of the file skipped, in their dtypes\n"),
            std::string::npos)
      << run.out;
  const auto expected = rank0_losses(temp_path("renamed_reference.jsonl"));
  ASSERT_EQ(expected.size(), 4u);
  EXPECT_EQ(rank0_losses(temp_path("renamed.jsonl")), expected);

  // Without the map the names do not fit; a map that gives two tensors one name is refused.
  const RunResult unmapped = mfsdp(plus(skeleton_run(plan, "unmapped"), {"--init-from", dir}));
  EXPECT_EQ(unmapped.exit_code, 2) << unmapped.err;
  EXPECT_NE(unmapped.err.find("does not fit the model: missing ("), std::string::npos)
      << unmapped.err;
  EXPECT_NE(unmapped.err.find("or rename them with --name-map (docs/large-models.md#name-maps)\n"),
            std::string::npos)
      << unmapped.err;
  const std::string clash = temp_path("clash.map.json");
  std::ofstream(clash) << R"({"rules": [{"file": "h.0.ln_1.weight", "model": "ln_f.weight"},
    {"file": "h.1.ln_1.weight", "model": "ln_f.weight"}]})";
  const RunResult clashing =
      mfsdp(plus(skeleton_run(plan, "clash"), {"--init-from", dir, "--name-map", clash}));
  EXPECT_EQ(clashing.exit_code, 2) << clashing.err;
  // h.0.ln_1.weight, h.1.ln_1.weight and ln_f.weight itself: two clashes.
  EXPECT_NE(clashing.err.find("given one name by --name-map (2): "), std::string::npos)
      << clashing.err;
}

// A real Hugging Face checkpoint: GPT2LMHeadModel's save_pretrained (transformers 4.39.3,
// tests/fixtures/safetensors/make_hf_gpt2_fixture.py), read into tied_lm's skeleton (the same
// TinyGPT code) through the shipped map, trains exactly like the TorchScript TinyGPT that
// Python loaded those weights into (and checked against transformers' logits).
TEST(SkeletonStart, AHuggingFaceGpt2CheckpointTrainsThroughTheShippedMap) {
  const std::string hf = "tests/fixtures/safetensors/hf_gpt2/";
  const RunResult reference =
      mfsdp(skeleton_run(tied_plan(hf + "tinygpt.pt", "hf_reference"), "hf_reference"));
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const RunResult run = mfsdp(plus(
      skeleton_run(tied_plan(kSkeletonFile, "hf_skeleton"), "hf_skeleton"),
      {"--init-from", hf + "model.safetensors", "--name-map", "examples/name-maps/hf-gpt2.json"}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find(": 28 parameter(s) renamed by examples/name-maps/hf-gpt2.json (8 "
                         "transposed), in their dtypes\n"),
            std::string::npos)
      << run.out;
  const auto expected = rank0_losses(temp_path("hf_reference.jsonl"));
  ASSERT_EQ(expected.size(), 4u);
  EXPECT_EQ(rank0_losses(temp_path("hf_skeleton.jsonl")), expected);
}

}  // namespace
}  // namespace mfsdp::testing
