// Exporting a checkpoint gives an ordinary TorchScript file with the trained parameters, in
// C++ and in Python, and `mfsdp export` does it from the command line.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <torch/script.h>

#include "executor/train/export.h"
#include "safetensors/safetensors.h"
#include "schema/error.h"
#include "tests/cli/cli_test_support.h"
#include "tests/executor/train/checkpoint_runs.h"

namespace mfsdp::testing {
namespace {

namespace fs = std::filesystem;

at::Tensor parameter(const torch::jit::Module& module, const std::string& name) {
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    if (p.name == name) return p.value;
  }
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

at::Tensor tokens() {
  return torch::randint(256, {3, 16}, at::detail::createCPUGenerator(7), torch::kLong);
}

TEST(CheckpointExport, GivesTheTrainedParametersWithTiesKept) {
  const std::string dir = fresh_dir("export");
  std::map<std::string, at::Tensor> trained;
  const std::string checkpoint = trained_checkpoint(dir, 2, &trained);
  ASSERT_FALSE(trained.empty());
  const std::string out = dir + "/trained_model.pt";

  // The directory of checkpoints resolves to its newest one.
  const executor::ExportSummary summary = executor::export_model(dir + "/ckpt", out);
  EXPECT_EQ(summary.checkpoint, checkpoint);
  EXPECT_EQ(summary.step, 2);
  EXPECT_EQ(summary.model_path, fixture_path("tied_lm.pt"));

  torch::jit::Module exported = torch::jit::load(out);
  size_t compared = 0;
  for (const auto& p : exported.named_parameters(/*recurse=*/true)) {
    ASSERT_TRUE(trained.count(p.name)) << p.name;
    EXPECT_TRUE(torch::equal(p.value, trained.at(p.name))) << p.name;
    ++compared;
  }
  EXPECT_EQ(compared, trained.size());
  // Still one tensor under two names.
  EXPECT_TRUE(parameter(exported, "lm_head.weight").is_same(parameter(exported, "wte.weight")));

  // Same outputs as the original model holding the trained parameters; not the untrained ones.
  torch::jit::Module original = torch::jit::load(fixture_path("tied_lm.pt"));
  const at::Tensor untrained = original.forward({tokens()}).toTensor();
  {
    at::NoGradGuard no_grad;
    for (const auto& p : original.named_parameters(/*recurse=*/true)) {
      p.value.copy_(trained.at(p.name));
    }
  }
  const at::Tensor expected = original.forward({tokens()}).toTensor();
  const at::Tensor got = exported.forward({tokens()}).toTensor();
  EXPECT_TRUE(torch::equal(got, expected));
  EXPECT_FALSE(torch::equal(got, untrained));
  // The manifest travels with the model.
  torch::jit::ExtraFilesMap extra{{"mfsdp_checkpoint.json", ""}};
  torch::jit::load(out, c10::nullopt, extra);
  EXPECT_NE(extra.at("mfsdp_checkpoint.json").find("\"mfsdp.checkpoint/1\""), std::string::npos);
}

TEST(CheckpointExport, LoadsInPython) {
  const char* python = "/usr/bin/python3";
  if (!fs::exists(python) || run_program(python, {"-c", "import torch"}).exit_code != 0) {
    GTEST_SKIP() << python << " with torch is not installed";
  }
  const std::string dir = fresh_dir("export_python");
  const std::string checkpoint = trained_checkpoint(dir, 1);
  const std::string out = dir + "/trained_model.pt";
  executor::export_model(checkpoint, out);
  const std::string script =
      "import sys, torch\n"
      "m = torch.jit.load(sys.argv[1])\n"
      "assert m.lm_head.weight.data_ptr() == m.wte.weight.data_ptr(), 'untied'\n"
      "y = m(torch.zeros(2, 16, dtype=torch.long))\n"
      "print(tuple(y.shape))\n";
  const RunResult r = run_program(python, {"-c", script, out});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "(2, 16, 256)\n") << r.err;
}

TEST(CheckpointExport, RefusesAModelOfAnotherStructure) {
  const std::string dir = fresh_dir("export_other_model");
  const std::string checkpoint = trained_checkpoint(dir, 1);
  const std::string out = dir + "/trained_model.pt";
  try {
    executor::export_model(checkpoint, out, fixture_path("untied_lm.pt"));
    FAIL() << "exported with a model of another structure";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("untied_lm.pt does not match the plan of " + checkpoint),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
}

TEST(CheckpointExport, RefusesADamagedPlanCopy) {
  const std::string dir = fresh_dir("export_damaged");
  const std::string checkpoint = trained_checkpoint(dir, 1);
  std::ofstream(checkpoint + "/plan.json", std::ios::app) << " ";
  try {
    executor::export_model(checkpoint, dir + "/out.pt");
    FAIL() << "exported from a damaged checkpoint";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("plan.json does not match its sha256"), std::string::npos)
        << e.what();
  }
}

TEST(ExportCli, WritesTheTrainedModel) {
  const std::string dir = fresh_dir("export_cli");
  const std::string checkpoint = trained_checkpoint(dir, 1);
  const std::string out = dir + "/out/trained_model.pt";
  fs::create_directories(dir + "/out");
  const RunResult r = mfsdp({"export", checkpoint, "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "mfsdp export: " + checkpoint + " (step 1) -> " + out + "\n");
  EXPECT_NO_THROW(torch::jit::load(out));
  // Written through a temp file that was renamed: nothing else is left next to it.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir + "/out"), fs::directory_iterator()), 1);
}

TEST(ExportCli, BadCheckpointPathIsOneLineWithExitTwo) {
  const std::string dir = fresh_dir("export_cli_bad");
  const std::string out = dir + "/trained_model.pt";
  const RunResult r = mfsdp({"export", dir + "/no_such_checkpoint", "-o", out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("no_such_checkpoint: no such checkpoint directory"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(out));

  const RunResult empty = mfsdp({"export", dir, "-o", out});
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_EQ(line_count(empty.err), 1u) << empty.err;
  EXPECT_NE(empty.err.find("is not a checkpoint"), std::string::npos) << empty.err;
}

// As run's output flags say it, before the checkpoint is read.
TEST(ExportCli, AMissingOutputDirectoryIsNamedLikeRunsOutputs) {
  const std::string dir = fresh_dir("export_cli_dir");
  const RunResult r = mfsdp({"export", dir + "/no_such_checkpoint", "-o", dir + "/gone/m.pt"});
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_EQ(r.err, "mfsdp: error: -o " + dir + "/gone/m.pt: the directory " + dir +
                       "/gone does not exist; create it first\n");
}

TEST(ExportCli, FailureLeavesAnEarlierOutputAlone) {
  const std::string dir = fresh_dir("export_cli_keep");
  const std::string checkpoint = trained_checkpoint(dir, 1);
  const std::string out = dir + "/trained_model.pt";
  std::ofstream(out) << "an earlier export";
  const RunResult r =
      mfsdp({"export", checkpoint, "-o", out, "--model", fixture_path("untied_lm.pt")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1u) << r.err;
  EXPECT_EQ(read_file(out), "an earlier export");

  const RunResult unwritable = mfsdp({"export", checkpoint, "-o", dir + "/missing_dir/m.pt"});
  EXPECT_EQ(unwritable.exit_code, 5);
  EXPECT_EQ(line_count(unwritable.err), 1u) << unwritable.err;
  EXPECT_NE(unwritable.err.find("-o " + dir + "/missing_dir/m.pt: the directory " + dir +
                                "/missing_dir does not exist"),
            std::string::npos)
      << unwritable.err;
}

// safetensors: every trained parameter once under its own name, bit for bit what training
// ended with (trained_checkpoint's reference is the run's full parameters), in files of at
// most the cap, read back by the reader that takes Python's files byte for byte.
TEST(SafetensorsExport, GivesEveryTrainedParameterOnceByName) {
  const std::string dir = fresh_dir("export_safetensors");
  std::map<std::string, at::Tensor> trained;
  const std::string checkpoint = trained_checkpoint(dir, 2, &trained);
  const std::string out = dir + "/weights";
  const executor::ExportSummary summary =
      executor::export_safetensors(dir + "/ckpt", out, 30 * 1000);
  EXPECT_EQ(summary.checkpoint, checkpoint);
  EXPECT_GT(summary.files.size(), 2u);
  const safetensors::Checkpoint weights(out);
  // The tied head is the embedding: written once, under the first name (as transformers does).
  EXPECT_EQ(weights.find("lm_head.weight"), nullptr);
  size_t compared = 0;
  for (const auto& [name, value] : trained) {
    if (name == "lm_head.weight") continue;
    const safetensors::Checkpoint::Entry& entry = weights.at(name);
    EXPECT_EQ(entry.info->dtype, safetensors::Dtype::kF32) << name;
    EXPECT_EQ(entry.info->shape, value.sizes().vec()) << name;
    const at::Tensor expected = value.contiguous();
    ASSERT_EQ(entry.info->byte_size(), expected.nbytes()) << name;
    EXPECT_EQ(std::memcmp(entry.file->data(*entry.info), expected.data_ptr(), expected.nbytes()), 0)
        << name;
    ++compared;
  }
  EXPECT_EQ(compared, trained.size() - 1);
  EXPECT_EQ(weights.tensors().size(), compared);  // tied_lm has no buffers
  for (const auto& file : weights.files()) {
    uint64_t bytes = 0;
    for (const auto& tensor : file->tensors()) bytes += tensor.byte_size();
    EXPECT_TRUE(bytes <= 30 * 1000 || file->tensors().size() == 1) << file->path();
  }
}

TEST(ExportCli, WritesSafetensorsAndRefusesABadFileSize) {
  const std::string dir = fresh_dir("export_cli_safetensors");
  const std::string checkpoint = trained_checkpoint(dir, 1);
  const RunResult r = mfsdp({"export", checkpoint, "--format", "safetensors", "-o", dir + "/out/"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err,
            "mfsdp export: " + checkpoint + " (step 1) -> " + dir + "/out/ (1 safetensors file)\n");
  // Under the 5 GB default, one file and no index.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir + "/out"), fs::directory_iterator()), 1);
  EXPECT_NO_THROW(safetensors::Checkpoint(dir + "/out/model.safetensors"));

  const RunResult zero = mfsdp({"export", checkpoint, "--format", "safetensors", "-o",
                                dir + "/zero", "--max-file-size", "0"});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_EQ(zero.err, "mfsdp: error: --max-file-size must be at least 1 byte; got 0\n");
  EXPECT_FALSE(fs::exists(dir + "/zero"));
  const RunResult format = mfsdp({"export", checkpoint, "--format", "onnx", "-o", dir + "/x"});
  EXPECT_EQ(format.exit_code, 2);
  EXPECT_EQ(line_count(format.err), 1u) << format.err;
}

}  // namespace
}  // namespace mfsdp::testing
