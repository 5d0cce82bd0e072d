// Checkpoints of real 2-rank training runs: resuming is bit-exact, mismatched or damaged
// checkpoints are refused on every rank, and a crashed save never looks like a checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include <torch/script.h>

#include "executor/train/checkpoint.h"
#include "executor/train/checkpoint_format.h"
#include "executor/train/export.h"
#include "schema/digest.h"
#include "schema/error.h"
#include "tests/executor/parity/parity_config.h"
#include "tests/executor/train/checkpoint_runs.h"

namespace mfsdp::testing {
namespace {

namespace fs = std::filesystem;

struct Trained {
  std::map<std::string, at::Tensor> params;
  std::vector<double> losses;
};

Trained read_result(const std::string& path) {
  Trained t;
  load_parity_result(path, t.params, t.losses);
  return t;
}

// Names of the parameters whose values differ between two results.
std::vector<std::string> differing(const Trained& a, const Trained& b) {
  std::vector<std::string> names;
  for (const auto& [name, value] : a.params) {
    if (!b.params.count(name) || !torch::equal(value, b.params.at(name))) names.push_back(name);
  }
  return names;
}

TEST(CheckpointResume, ContinuesBitForBitOnTwoRanks) {
  const std::string dir = fresh_dir("resume");
  WorkerRun straight;
  straight.plan = plan_tied_lm(dir, "plan.json", 2);
  straight.steps = 6;
  straight.out = dir + "/straight.pt";
  straight.dir = dir + "/ckpt";
  straight.save_every = 3;
  std::vector<RankResult> ranks = run_workers(straight);
  for (const auto& r : ranks) ASSERT_EQ(r.exit_code, 0) << describe(ranks);
  ASSERT_TRUE(fs::exists(dir + "/ckpt/step-00000003/manifest.json"));
  ASSERT_TRUE(fs::exists(dir + "/ckpt/step-00000006/manifest.json"));

  WorkerRun resumed = straight;
  resumed.out = dir + "/resumed.pt";
  resumed.save_every = 0;
  resumed.dir.clear();
  resumed.resume = dir + "/ckpt/step-00000003";
  ranks = run_workers(resumed);
  for (const auto& r : ranks) ASSERT_EQ(r.exit_code, 0) << describe(ranks);
  EXPECT_NE(ranks[0].out.find("resumed at step 3"), std::string::npos) << describe(ranks);

  const Trained a = read_result(straight.out);
  const Trained b = read_result(resumed.out);
  ASSERT_EQ(a.params.size(), b.params.size());
  EXPECT_EQ(differing(a, b), std::vector<std::string>{});
  ASSERT_EQ(a.losses.size(), 6u);
  ASSERT_EQ(b.losses.size(), 3u);
  for (size_t s = 0; s < 3; ++s) EXPECT_EQ(a.losses[3 + s], b.losses[s]) << "step " << 3 + s;

  // The comparison can fail: training moved the weights, and the dropout masks (the default
  // generator the checkpoint restores) change the result when they are drawn afresh.
  torch::jit::Module initial = torch::jit::load(fixture_path("tied_lm.pt"));
  EXPECT_FALSE(torch::equal(initial.attr("wte").toModule().attr("weight").toTensor(),
                            a.params.at("wte.weight")));
  WorkerRun reseeded = resumed;
  reseeded.out = dir + "/reseeded.pt";
  reseeded.reseed = true;
  ranks = run_workers(reseeded);
  for (const auto& r : ranks) ASSERT_EQ(r.exit_code, 0) << describe(ranks);
  EXPECT_FALSE(differing(a, read_result(reseeded.out)).empty());
}

// A checkpoint of 1 step on 2 ranks, then a resume with `run` changed by `change`.
std::vector<RankResult> resume_after(
    const std::string& name, const std::function<void(const std::string&, WorkerRun&)>& change) {
  const std::string dir = fresh_dir(name);
  const std::string checkpoint = trained_checkpoint(dir, 1);
  WorkerRun run;
  run.plan = dir + "/plan.json";
  run.steps = 2;
  run.out = dir + "/resumed.pt";
  run.resume = checkpoint;
  change(checkpoint, run);
  return run_workers(run);
}

// Every rank fails with exit 2 and one line; `rank_text[r]` is in rank r's message.
void expect_refused(const std::vector<RankResult>& ranks,
                    const std::vector<std::string>& rank_text) {
  ASSERT_EQ(ranks.size(), rank_text.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_EQ(ranks[r].exit_code, 2) << describe(ranks);
    EXPECT_EQ(line_count(ranks[r].err), 1u) << describe(ranks);
    EXPECT_NE(ranks[r].err.find(rank_text[r]), std::string::npos) << rank_text[r] << "\n"
                                                                  << describe(ranks);
  }
}

// Another plan of the same layout (only the prefetch differs) is resharded one to one: the
// resumed run computes exactly what the straight one does, dropout masks included.
TEST(CheckpointResume, UnderAnotherScheduleOfTheSameLayoutContinuesBitForBit) {
  const std::string dir = fresh_dir("reschedule");
  WorkerRun straight;
  straight.plan = plan_tied_lm(dir, "plan.json", 2);
  straight.steps = 4;
  straight.out = dir + "/straight.pt";
  straight.dir = dir + "/ckpt";
  straight.save_every = 2;
  std::vector<RankResult> ranks = run_workers(straight);
  for (const auto& r : ranks) ASSERT_EQ(r.exit_code, 0) << describe(ranks);

  WorkerRun resumed;
  resumed.plan = plan_tied_lm(dir, "prefetch2.json", 2, /*prefetch=*/2);
  resumed.steps = 4;
  resumed.out = dir + "/resumed.pt";
  resumed.resume = dir + "/ckpt/step-00000002";
  ranks = run_workers(resumed);
  for (const auto& r : ranks) ASSERT_EQ(r.exit_code, 0) << describe(ranks);
  EXPECT_EQ(differing(read_result(straight.out), read_result(resumed.out)),
            std::vector<std::string>{});
}

TEST(CheckpointLoad, RefusesMissingRankFileOnEveryRank) {
  const auto ranks = resume_after("missing", [](const std::string& checkpoint, WorkerRun&) {
    fs::remove(checkpoint + "/rank-00001.pt");
  });
  expect_refused(ranks, {"another rank could not load its part",
                         "rank-00001.pt is missing: the checkpoint is incomplete"});
}

TEST(CheckpointLoad, RefusesTruncatedRankFile) {
  const auto ranks = resume_after("truncated", [](const std::string& checkpoint, WorkerRun&) {
    const std::string file = checkpoint + "/rank-00000.pt";
    fs::resize_file(file, fs::file_size(file) / 2);
  });
  expect_refused(ranks, {"rank-00000.pt has ", "another rank could not load its part"});
  EXPECT_NE(ranks[0].err.find("bytes but the manifest records"), std::string::npos);
}

TEST(CheckpointLoad, RefusesCorruptRankFile) {
  const auto ranks = resume_after("corrupt", [](const std::string& checkpoint, WorkerRun&) {
    std::fstream file(checkpoint + "/rank-00001.pt",
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(fs::file_size(checkpoint + "/rank-00001.pt") / 2));
    const char byte = static_cast<char>(file.get());
    file.seekp(-1, std::ios::cur);
    file.put(static_cast<char>(byte ^ 0x40));
  });
  expect_refused(ranks, {"another rank could not load its part",
                         "rank-00001.pt does not match its sha256 in the manifest (corrupt)"});
}

// A rank file replaced by a link to an identical copy elsewhere: refused, not followed.
TEST(CheckpointLoad, RefusesARankFileThatIsASymbolicLink) {
  const auto ranks = resume_after("rank_link", [](const std::string& checkpoint, WorkerRun&) {
    const std::string file = checkpoint + "/rank-00001.pt";
    const std::string elsewhere = checkpoint + "/../rank-00001.elsewhere.pt";
    fs::copy_file(file, elsewhere, fs::copy_options::overwrite_existing);
    fs::remove(file);
    fs::create_symlink(fs::absolute(elsewhere), file);
  });
  expect_refused(ranks, {"another rank could not load its part",
                         "rank-00001.pt is a symbolic link; a checkpoint's rank files must be the "
                         "regular files the save wrote there"});
}

// A flipped byte in plan.json: resume refuses it as export does (it used to resume silently,
// since a same-plan resume never read the file).
TEST(CheckpointLoad, RefusesADamagedPlanJsonAsExportDoes) {
  std::string damaged_checkpoint;
  const auto ranks = resume_after("plan_flip", [&](const std::string& checkpoint, WorkerRun&) {
    damaged_checkpoint = checkpoint;
    const std::string file = checkpoint + "/plan.json";
    std::fstream plan(file, std::ios::in | std::ios::out | std::ios::binary);
    plan.seekg(static_cast<std::streamoff>(fs::file_size(file) / 2));
    const char byte = static_cast<char>(plan.get());
    plan.seekp(-1, std::ios::cur);
    plan.put(static_cast<char>(byte == ' ' ? '\t' : ' '));
  });
  const std::string text = "plan.json does not match its sha256 in the manifest (damaged)";
  expect_refused(ranks, {text, text});
  try {
    executor::export_model(damaged_checkpoint, ::testing::TempDir() + "/plan_flip_export.pt");
    ADD_FAILURE() << "export read the damaged checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

// Appends to rank 1's file and records its new size and sha256 in the manifest (and, when
// asked, deletes the manifest's checksum), as someone patching the shards by hand would.
void change_rank_file_and_its_entry(const std::string& checkpoint, bool remove_checksum) {
  const std::string file = checkpoint + "/rank-00001.pt";
  std::ofstream(file, std::ios::app | std::ios::binary) << "appended bytes";
  std::ifstream in(checkpoint + "/manifest.json");
  nlohmann::ordered_json manifest = nlohmann::ordered_json::parse(in);
  manifest["ranks"][1]["bytes"] = fs::file_size(file);
  manifest["ranks"][1]["sha256"] = schema::sha256_file_hex(file);
  if (remove_checksum) manifest.erase("checksum");
  std::ofstream(checkpoint + "/manifest.json") << manifest.dump(2);
}

// A rank file changed and its size and sha256 in the manifest changed to match, as someone
// patching the shards by hand would: the manifest's own checksum no longer matches, so the
// edit is caught before any rank trains on the changed shards.
TEST(CheckpointLoad, RefusesARankFileEditedTogetherWithItsManifestEntry) {
  const auto ranks = resume_after("rehashed", [](const std::string& checkpoint, WorkerRun&) {
    change_rank_file_and_its_entry(checkpoint, /*remove_checksum=*/false);
  });
  const std::string text =
      "manifest.json does not match its own checksum: it was edited or "
      "damaged after the save; use another checkpoint";
  expect_refused(ranks, {text, text});
}

// The same edit with the checksum deleted: the checksum is not optional, so removing it is
// refused too, instead of skipping the check.
TEST(CheckpointLoad, RefusesAManifestWhoseChecksumWasRemoved) {
  const auto ranks = resume_after("unsealed", [](const std::string& checkpoint, WorkerRun&) {
    change_rank_file_and_its_entry(checkpoint, /*remove_checksum=*/true);
  });
  const std::string text =
      "manifest.json has no checksum: mfsdp writes one into every manifest, so it was removed or "
      "the checkpoint is older than mfsdp of 2026-12-04; use another checkpoint, or set "
      "MFSDP_ACCEPT_UNCHECKED_MANIFEST=1 to read one you trust unchecked";
  expect_refused(ranks, {text, text});
}

// The manifest's checksum as docs/checkpoints.md defines it, computed here independently: the
// SHA-256 of the rest of the manifest as compact JSON with sorted keys.
void seal(nlohmann::ordered_json& doc) {
  nlohmann::json canonical = nlohmann::json::parse(doc.dump());
  canonical.erase("checksum");
  doc["checksum"] = schema::sha256_hex(canonical.dump());
}

// The checksum covers what the manifest says, not how it is laid out; a manifest without one
// (older than the checksum, or stripped) is read only when the user sets
// MFSDP_ACCEPT_UNCHECKED_MANIFEST=1.
TEST(CheckpointManifest, ChecksumIgnoresLayoutAndCatchesAnyChangedValue) {
  const std::string dir = fresh_dir("checksum");
  executor::Manifest m;
  m.step = 3;
  m.plan_sha256 = std::string(64, 'a');
  m.ranks.push_back({0, "rank-00000.pt", 10, std::string(64, '0')});
  const nlohmann::ordered_json written = nlohmann::ordered_json::parse(executor::dump_manifest(m));
  ASSERT_EQ(written.at("checksum").get<std::string>().size(), 64u);
  const auto read_back = [&](const nlohmann::ordered_json& doc) {
    std::ofstream(dir + "/manifest.json") << doc.dump();
    return executor::read_manifest(dir);
  };
  EXPECT_EQ(read_back(written).step, 3);  // no indentation: the same manifest
  nlohmann::ordered_json resealed = written;
  seal(resealed);
  EXPECT_EQ(resealed, written);  // the writer's checksum is the documented one
  nlohmann::ordered_json older = written;
  older.erase("checksum");
  try {
    read_back(older);
    ADD_FAILURE() << "a manifest without a checksum was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("manifest.json has no checksum"), std::string::npos)
        << e.what();
  }
  ::setenv("MFSDP_ACCEPT_UNCHECKED_MANIFEST", "1", 1);
  ::testing::internal::CaptureStderr();
  const size_t ranks = read_back(older).ranks.size();
  const std::string warning = ::testing::internal::GetCapturedStderr();
  ::unsetenv("MFSDP_ACCEPT_UNCHECKED_MANIFEST");
  EXPECT_EQ(ranks, 1u);
  EXPECT_NE(warning.find("manifest.json has no checksum; reading it unchecked because "
                         "MFSDP_ACCEPT_UNCHECKED_MANIFEST=1"),
            std::string::npos)
      << warning;
  for (const char* field : {"step", "plan", "ranks"}) {
    nlohmann::ordered_json edited = written;
    if (std::string(field) == "step") edited["step"] = 4;
    if (std::string(field) == "plan") edited["plan"]["sha256"] = std::string(64, 'b');
    if (std::string(field) == "ranks") edited["ranks"][0]["bytes"] = 11;
    try {
      read_back(edited);
      ADD_FAILURE() << "an edited " << field << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_NE(std::string(e.what()).find("does not match its own checksum"), std::string::npos)
          << e.what();
    }
  }
}

// A manifest's integers must be integers: nlohmann would cast a fraction (undefined behaviour
// for 2.5e+83, which tests/fuzz found) and wrap a number beyond 2^63 - 1.
TEST(CheckpointManifest, RefusesFractionsAndIntegersBeyond64Bits) {
  executor::Manifest m;
  m.step = 3;
  m.ranks.push_back({0, "rank-00000.pt", 10, std::string(64, '0')});
  const nlohmann::ordered_json written = nlohmann::ordered_json::parse(executor::dump_manifest(m));
  const std::string path = "ckpt/step-00000003/manifest.json";
  const auto error_of = [&](const std::function<void(nlohmann::ordered_json&)>& edit) {
    nlohmann::ordered_json doc = written;
    edit(doc);
    seal(doc);  // as someone who edits a manifest on purpose would, to reach the field
    try {
      executor::parse_manifest(doc.dump(2), path);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const auto damaged = [&](const std::string& what) {
    return path + " is damaged (" + what + ", not an integer of 64 bits); use another checkpoint";
  };
  EXPECT_EQ(error_of([](auto& doc) { doc["step"] = 2.5; }), damaged("step is 2.5"));
  EXPECT_EQ(error_of([](auto& doc) { doc["mesh"]["world_size"] = 2.5e83; }),
            damaged("world_size is 2.5e+83"));
  EXPECT_EQ(error_of([](auto& doc) { doc["ranks"][0]["bytes"] = uint64_t{1} << 63; }),
            damaged("bytes is 9223372036854775808"));
  EXPECT_EQ(error_of([](auto& doc) { doc["ranks"][0]["rank"] = -0.0; }), damaged("rank is -0.0"));
  EXPECT_EQ(error_of([](auto& doc) { doc["step"] = "3"; }),
            path +
                " is damaged ([json.exception.type_error.302] type must be number, but is "
                "string); use another checkpoint");
  EXPECT_EQ(error_of([](auto&) {}), "accepted");
}

// ordered_json copies an object's members recursively as it grows: a config nested 100000
// arrays deep crashed `mfsdp export` on the stack while the manifest was read.
TEST(CheckpointManifest, RefusesArraysAndObjectsNestedDeeperThan256Levels) {
  executor::Manifest m;
  m.step = 3;
  m.config = {{"a", 1}, {"b", 2}};
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(executor::dump_manifest(m));
  // Without its checksum, which the one that reads gets back below: the depth is judged first.
  doc.erase("checksum");
  const std::string text = doc.dump(2);
  const auto nested = [&](size_t arrays) {
    std::string deep = text;
    return deep.insert(deep.find("\"config\": {") + 11,
                       "\"deep\": " + std::string(arrays, '[') + std::string(arrays, ']') + ", ");
  };
  // The manifest, its config and 254 arrays: 256 levels.
  nlohmann::ordered_json deepest = nlohmann::ordered_json::parse(nested(254));
  seal(deepest);
  EXPECT_EQ(executor::parse_manifest(deepest.dump(2), "m.json").config.at("deep").size(), 1u);
  const std::string deeper = nested(100000);
  const std::string line =
      std::to_string(std::count(deeper.begin(), deeper.begin() + deeper.find("deep"), '\n') + 1);
  try {
    executor::parse_manifest(deeper, "m.json");
    ADD_FAILURE() << "a manifest nested 100002 levels deep was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_EQ(std::string(e.what()),
              "m.json is damaged (not valid JSON: arrays and objects nested deeper than 256 levels "
              "(line " +
                  line + " column 276)); use another checkpoint");
  }
}

// What a save that crashed before its rename leaves: a temp directory, even one whose
// manifest was already written.
void leave_crashed_save(const std::string& dir, int64_t step) {
  const std::string temp = dir + "/." + executor::checkpoint_name(step) + ".saving.tmp";
  fs::create_directories(temp);
  executor::Manifest manifest;
  manifest.step = step;
  std::ofstream(temp + "/manifest.json") << executor::dump_manifest(manifest);
  std::ofstream(temp + "/rank-00000.pt") << "half a rank file";
}

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

TEST(CheckpointSave, IgnoresAndRemovesCrashedSavesAndKeepsTheNewest) {
  const std::string dir = fresh_dir("crash");
  const std::string ckpt = dir + "/ckpt";
  leave_crashed_save(ckpt, 2);
  leave_crashed_save(ckpt, 7);
  EXPECT_EQ(executor::latest_checkpoint(ckpt), std::nullopt);

  WorkerRun run;
  run.plan = plan_tied_lm(dir, "plan.json", 2);
  run.steps = 4;
  run.out = dir + "/trained.pt";
  run.dir = ckpt;
  run.save_every = 1;
  run.keep = 2;
  const std::vector<RankResult> ranks = run_workers(run);
  for (const auto& r : ranks) ASSERT_EQ(r.exit_code, 0) << describe(ranks);

  EXPECT_EQ(entries(ckpt), (std::set<std::string>{"step-00000003", "step-00000004"}));
  EXPECT_EQ(executor::latest_checkpoint(ckpt), ckpt + "/step-00000004");
  const std::string latest = ckpt + "/step-00000004";
  EXPECT_EQ(entries(latest), (std::set<std::string>{"manifest.json", "plan.json", "rank-00000.pt",
                                                    "rank-00001.pt"}));
  const executor::Manifest manifest = executor::read_manifest(latest);
  EXPECT_EQ(manifest.step, 4);
  EXPECT_EQ(manifest.mesh.world_size, 2);
  EXPECT_EQ(manifest.config.at("steps"), 4);
  EXPECT_EQ(manifest.optimizer.at("kind"), "adamw");
  EXPECT_EQ(manifest.model_path, fixture_path("tied_lm.pt"));
  ASSERT_EQ(manifest.ranks.size(), 2u);
  for (const auto& r : manifest.ranks) {
    EXPECT_EQ(r.file, executor::rank_file_name(r.rank));
    EXPECT_EQ(static_cast<uintmax_t>(r.bytes), fs::file_size(latest + "/" + r.file));
  }
}

TEST(LatestCheckpoint, PicksTheHighestCompleteStep) {
  const std::string dir = fresh_dir("latest");
  const auto make = [&](const std::string& name, int64_t step, const std::string& manifest) {
    fs::create_directories(dir + "/" + name);
    executor::Manifest m;
    m.step = step;
    if (manifest == "valid")
      std::ofstream(dir + "/" + name + "/manifest.json") << executor::dump_manifest(m);
    if (manifest == "damaged") std::ofstream(dir + "/" + name + "/manifest.json") << "{\"format\":";
  };
  make("step-00000002", 2, "valid");
  make("step-00000010", 10, "valid");
  make("step-00000011", 11, "none");  // not renamed into place by a save
  make("step-00000012", 12, "damaged");
  make("step-00000013", 9, "valid");  // its manifest is another step's
  make(".step-00000014.saving.tmp", 14, "valid");
  make("step-9", 9, "valid");  // not a checkpoint name
  EXPECT_EQ(executor::latest_checkpoint(dir), dir + "/step-00000010");
  // What a resume passes over, newest first, each with why.
  const executor::LatestCheckpoint found = executor::find_latest_checkpoint(dir);
  EXPECT_EQ(found.path, dir + "/step-00000010");
  ASSERT_EQ(found.passed_over.size(), 3u);
  EXPECT_EQ(found.passed_over[0], dir + "/step-00000013 (its manifest is for step 9)");
  EXPECT_EQ(found.passed_over[1].rfind(dir + "/step-00000012 (", 0), 0u) << found.passed_over[1];
  EXPECT_EQ(found.passed_over[2].rfind(dir + "/step-00000011 (", 0), 0u) << found.passed_over[2];
}

// An edited manifest cannot point resume or export at a file outside the checkpoint.
TEST(CheckpointManifest, RefusesRankFilesOutsideTheCheckpointDirectory) {
  const std::string dir = fresh_dir("outside");
  for (const std::string file : {"../../../../etc/passwd", "/etc/passwd", "..", ""}) {
    executor::Manifest m;
    m.step = 1;
    m.ranks.push_back({0, file, 10, std::string(64, '0')});
    std::ofstream(dir + "/manifest.json") << executor::dump_manifest(m);
    try {
      executor::read_manifest(dir);
      ADD_FAILURE() << "accepted rank file '" << file << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_NE(std::string(e.what()).find("names rank file '" + file +
                                           "', which is not a file name in the checkpoint "
                                           "directory"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(LatestCheckpoint, NoneInAMissingOrEmptyDirectory) {
  const std::string dir = fresh_dir("none");
  EXPECT_EQ(executor::latest_checkpoint(dir), std::nullopt);
  EXPECT_EQ(executor::latest_checkpoint(dir + "/absent"), std::nullopt);
}

TEST(CheckpointName, HasAtLeastEightDigits) {
  EXPECT_EQ(executor::checkpoint_name(42), "step-00000042");
  EXPECT_EQ(executor::checkpoint_name(123456789), "step-123456789");
}

}  // namespace
}  // namespace mfsdp::testing
