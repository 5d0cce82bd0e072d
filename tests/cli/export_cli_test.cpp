// `mfsdp export` of checkpoints edited by hand: whatever the files say, a refusal is one line
// with exit 2, never an internal error. The checkpoint comes from a one-step `mfsdp run`.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "schema/digest.h"
#include "tests/cli/cli_test_support.h"

namespace mfsdp::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// A fresh copy of one checkpoint of tied_lm, trained for a step on one rank.
std::string checkpoint_copy(const std::string& name) {
  static const std::string trained = [] {
    // ctest runs each test in a process of its own, in parallel: one run directory each.
    const std::string dir = temp_path("export_cli_run_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string plan = dir + "/tied_lm.plan.json";
    EXPECT_EQ(mfsdp({"plan", "tests/fixtures/tied_lm.pt", "--world-size", "1", "--unit", "layers.*",
                     "--unit", "<root>", "-o", plan, "-q"})
                  .exit_code,
              0);
    const RunResult r = mfsdp({"run", plan, "--data", "examples/tiny_corpus.txt", "--seq-len", "16",
                               "--global-batch", "2", "--steps", "1", "--checkpoint-dir",
                               dir + "/ckpt", "--master-port", "0"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return dir + "/ckpt/step-00000001";
  }();
  const std::string copy = temp_path("export_cli_" + name);
  fs::remove_all(copy);
  fs::copy(trained, copy);
  return copy;
}

// Rewrites the checkpoint's plan.json and records its new sha256 in the manifest, and the
// manifest's new checksum (docs/checkpoints.md), as someone who edits a checkpoint by hand
// on purpose would.
void edit_plan(const std::string& checkpoint, const std::function<void(ordered_json&)>& change) {
  ordered_json plan = ordered_json::parse(read_file(checkpoint + "/plan.json"));
  change(plan);
  const std::string text = plan.dump(2) + "\n";
  std::ofstream(checkpoint + "/plan.json", std::ios::binary | std::ios::trunc) << text;
  ordered_json manifest = ordered_json::parse(read_file(checkpoint + "/manifest.json"));
  manifest["plan"]["sha256"] = schema::sha256_hex(text);
  nlohmann::json canonical = nlohmann::json::parse(manifest.dump());
  canonical.erase("checksum");
  manifest["checksum"] = schema::sha256_hex(canonical.dump());
  std::ofstream(checkpoint + "/manifest.json", std::ios::trunc) << manifest.dump(2) << "\n";
}

void expect_refused(const std::string& checkpoint, const std::string& text) {
  const std::string out = checkpoint + ".pt";
  fs::remove(out);
  const RunResult r = mfsdp({"export", checkpoint, "-o", out});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("mfsdp: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST(ExportCli, ExportsTheUneditedCheckpoint) {
  const std::string checkpoint = checkpoint_copy("unedited");
  const RunResult r = mfsdp({"export", checkpoint, "-o", checkpoint + ".pt", "-q"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(ExportCli, APlanEditedAndRehashedMustStillPassTheRules) {
  // An offset far past the group once reached LibTorch's narrow() and exited with 70.
  const std::string checkpoint = checkpoint_copy("offset");
  edit_plan(checkpoint, [](ordered_json& plan) {
    plan["units"][0]["groups"][0]["params"][0]["offset"] = 1000000000000;
  });
  expect_refused(checkpoint, checkpoint + "/plan.json: not a valid plan (units[0].groups[0]");
  expect_refused(checkpoint, "; use another checkpoint");
}

TEST(ExportCli, APlanNamingAParameterTheModelLacksIsRefused) {
  // Consistent in itself, so only the model can tell; std::map::at once exited with 70.
  const std::string checkpoint = checkpoint_copy("renamed");
  edit_plan(checkpoint, [](ordered_json& plan) {
    plan["units"][0]["groups"][0]["params"][0]["name"] = "nope.weight";
  });
  const std::string model = kRepo + "/tests/fixtures/tied_lm.pt";
  expect_refused(checkpoint, model + " does not match the plan of " + checkpoint +
                                 ": units[0].groups[0].params[0].name: 'nope.weight' is not a "
                                 "parameter in " +
                                 model);
  expect_refused(checkpoint,
                 "plan.json was edited or damaged (its structural hash still matches "
                 "the model); use another checkpoint");
}

TEST(ExportCli, APlanRehashedWithoutTheManifestsChecksumIsDamaged) {
  const std::string checkpoint = checkpoint_copy("checksum");
  const std::string text = read_file(checkpoint + "/plan.json") + " ";
  std::ofstream(checkpoint + "/plan.json", std::ios::binary | std::ios::trunc) << text;
  ordered_json manifest = ordered_json::parse(read_file(checkpoint + "/manifest.json"));
  manifest["plan"]["sha256"] = schema::sha256_hex(text);
  std::ofstream(checkpoint + "/manifest.json", std::ios::trunc) << manifest.dump(2) << "\n";
  expect_refused(checkpoint, checkpoint + "/manifest.json does not match its own checksum");
}

TEST(ExportCli, APlanOfAnotherMeshThanTheManifestIsRefused) {
  const std::string checkpoint = checkpoint_copy("mesh");
  edit_plan(checkpoint, [](ordered_json& plan) { plan["mesh"]["world_size"] = 2; });
  expect_refused(checkpoint, "/plan.json: not a valid plan (mesh.world_size");
}

// The model file the manifest names was replaced after training by one of the same structure
// (here the trained model itself, which --save-model wrote): the structural check passes, but
// its frozen tensors would not be the ones trained with, so export refuses it; the same file
// named with --model is the user's choice, and only warned about.
TEST(ExportCli, AModelFileReplacedSinceThePlanIsRefusedUnlessNamedWithModel) {
  const std::string dir = temp_path("export_cli_replaced");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string model = dir + "/tied_lm.pt";
  fs::copy_file(kRepo + "/tests/fixtures/tied_lm.pt", model);
  const std::string plan = dir + "/tied_lm.plan.json";
  ASSERT_EQ(mfsdp({"plan", model, "--world-size", "1", "--unit", "layers.*", "--unit", "<root>",
                   "-o", plan, "-q"})
                .exit_code,
            0);
  const RunResult run =
      mfsdp({"run", plan, "--data", "examples/tiny_corpus.txt", "--seq-len", "16", "--global-batch",
             "2", "--steps", "1", "--checkpoint-dir", dir + "/ckpt", "--save-model",
             dir + "/trained.pt", "--master-port", "0"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string checkpoint = dir + "/ckpt/step-00000001";
  EXPECT_EQ(mfsdp({"export", checkpoint, "-o", dir + "/before.pt", "-q"}).exit_code, 0);
  fs::copy_file(dir + "/trained.pt", model, fs::copy_options::overwrite_existing);
  expect_refused(checkpoint, checkpoint + " was trained from " + model +
                                 ", which has changed since its plan was made (sha256 ");
  expect_refused(checkpoint, "; pass the model file the run trained with --model");
  const RunResult named =
      mfsdp({"export", checkpoint, "-o", dir + "/named.pt", "--model", model, "-q"});
  EXPECT_EQ(named.exit_code, 0) << named.err;
  EXPECT_NE(named.err.find("mfsdp: warning: --model " + model +
                           " is not the file the checkpoint's plan was made from (sha256 "),
            std::string::npos)
      << named.err;
  EXPECT_TRUE(fs::exists(dir + "/named.pt"));
}

// A manifest naming its model by a relative path (edited by hand) is read as a plan's is:
// beside the manifest, not from wherever export happens to run.
TEST(ExportCli, ARelativeModelPathInTheManifestIsBesideTheCheckpoint) {
  const std::string checkpoint = checkpoint_copy("relative");
  fs::copy_file(kRepo + "/tests/fixtures/tied_lm.pt", checkpoint + "/model.pt");
  ordered_json manifest = ordered_json::parse(read_file(checkpoint + "/manifest.json"));
  manifest["model"]["path"] = "model.pt";
  nlohmann::json canonical = nlohmann::json::parse(manifest.dump());
  canonical.erase("checksum");
  manifest["checksum"] = schema::sha256_hex(canonical.dump());
  std::ofstream(checkpoint + "/manifest.json", std::ios::trunc) << manifest.dump(2) << "\n";
  const RunResult r = mfsdp({"export", checkpoint, "-o", checkpoint + ".pt"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("-> " + checkpoint + ".pt"), std::string::npos) << r.err;
  fs::remove(checkpoint + "/model.pt");
  const std::string beside = fs::path(checkpoint + "/model.pt").lexically_normal().string();
  expect_refused(checkpoint,
                 checkpoint + " was trained from " + beside + ", which does not exist any more");
}

TEST(ExportCli, AManifestWithANulByteAndGarbageIsDamaged) {
  const std::string checkpoint = checkpoint_copy("nul");
  const std::string manifest = read_file(checkpoint + "/manifest.json");
  std::ofstream(checkpoint + "/manifest.json", std::ios::app | std::ios::binary)
      << std::string("\0garbage", 8);
  expect_refused(checkpoint, checkpoint +
                                 "/manifest.json is damaged (not valid JSON: trailing content "
                                 "after the JSON document: a NUL byte at byte offset " +
                                 std::to_string(manifest.size()));
}

}  // namespace
}  // namespace mfsdp::testing
