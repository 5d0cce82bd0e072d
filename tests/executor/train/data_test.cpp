#include "executor/train/data.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "schema/error.h"
#include "tests/executor/train/error_of.h"

namespace mfsdp::executor {
namespace {

using mfsdp::testing::error_of;

namespace fs = std::filesystem;

const std::string kFixtures = std::string(MFSDP_SOURCE_DIR) + "/tests/fixtures/data/";

// A directory of its own per test process, removed at the end of the test.
class DataFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mfsdp_data_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::string write_tokens(const std::string& name, const std::vector<uint16_t>& ids) {
    std::string bytes;
    for (uint16_t id : ids) {
      bytes.push_back(static_cast<char>(id & 0xff));
      bytes.push_back(static_cast<char>(id >> 8));
    }
    return write(name, bytes);
  }

  fs::path dir_;
};

// Every rank's microbatches of one step, concatenated in rank then microbatch order.
Batch global_batch(DataConfig config, int world_size, int64_t microbatches, int64_t step) {
  config.microbatches = microbatches;
  std::vector<at::Tensor> inputs, targets, ids;
  for (int rank = 0; rank < world_size; ++rank) {
    auto data = open_data(config, rank, world_size);
    for (int64_t m = 0; m < microbatches; ++m) {
      Batch b = data->batch(step, m);
      EXPECT_EQ(b.input.size(0), config.global_batch / (world_size * microbatches));
      inputs.push_back(b.input);
      if (b.target.defined()) targets.push_back(b.target);
      ids.push_back(b.sample_ids);
    }
  }
  Batch out{at::cat(inputs), at::Tensor(), at::cat(ids)};
  if (!targets.empty()) out.target = at::cat(targets);
  return out;
}

void expect_same(const Batch& a, const Batch& b) {
  EXPECT_TRUE(a.input.equal(b.input));
  EXPECT_TRUE(a.sample_ids.equal(b.sample_ids));
  ASSERT_EQ(a.target.defined(), b.target.defined());
  if (a.target.defined()) {
    EXPECT_TRUE(a.target.equal(b.target));
  }
}

// Step 0 and step 2 of world sizes 1-4 with several microbatch counts against W=1, M=1.
void expect_world_size_independent(const DataConfig& config) {
  for (int64_t step : {0, 2}) {
    const Batch reference = global_batch(config, 1, 1, step);
    EXPECT_TRUE(reference.sample_ids.equal(
        at::arange(step * config.global_batch, (step + 1) * config.global_batch, at::kLong)));
    for (auto [world, micro] :
         std::vector<std::pair<int, int64_t>>{{1, 3}, {2, 1}, {2, 2}, {3, 4}, {4, 3}, {4, 6}}) {
      SCOPED_TRACE("W=" + std::to_string(world) + " M=" + std::to_string(micro));
      expect_same(global_batch(config, world, micro, step), reference);
    }
  }
}

DataConfig synthetic_tokens() {
  DataConfig config;
  config.sample_shape = {8};
  config.vocab_size = 50;
  config.global_batch = 24;
  config.seed = 7;
  return config;
}

DataConfig synthetic_floats() {
  DataConfig config;
  config.sample_shape = {3, 4, 4};
  config.input_dtype = "float32";
  config.global_batch = 24;
  config.seed = 7;
  return config;
}

// Decimal squares: few repeated 7-byte windows, so a window's first match is its position.
std::string text_corpus() {
  std::string text;
  for (int i = 100; text.size() < 400; ++i) text += std::to_string(i * i) + ' ';
  return text;
}

DataConfig file_config(const std::string& kind, const std::string& path) {
  DataConfig config;
  config.kind = kind;
  config.path = path;
  config.seq_len = 6;
  config.global_batch = 24;
  config.seed = 7;
  return config;
}

// The first position where `window` occurs in `tokens`, or -1.
int64_t find_window(const std::vector<int64_t>& tokens, const at::Tensor& window) {
  const auto w = window.contiguous();
  const int64_t n = w.numel();
  for (size_t p = 0; p + n <= tokens.size(); ++p) {
    if (std::equal(tokens.begin() + p, tokens.begin() + p + n, w.data_ptr<int64_t>())) {
      return static_cast<int64_t>(p);
    }
  }
  return -1;
}

// Each sample is a real window of the file and its target is the input shifted by one.
void expect_windows_of(const std::vector<int64_t>& tokens, const Batch& batch) {
  std::set<int64_t> starts;
  for (int64_t i = 0; i < batch.input.size(0); ++i) {
    const at::Tensor window = at::cat({batch.input[i], batch.target[i].narrow(0, 5, 1)});
    const int64_t start = find_window(tokens, window);
    EXPECT_GE(start, 0) << "sample " << i << " is not a window of the file";
    EXPECT_TRUE(batch.input[i].narrow(0, 1, 5).equal(batch.target[i].narrow(0, 0, 5)));
    starts.insert(start);
  }
  EXPECT_GT(starts.size(), 10u) << "window positions do not vary";
}

TEST(BatchSplit, RejectsGlobalBatchNotDivisibleByRanksTimesMicrobatches) {
  const Error e = error_of([] { split_batch(10, 3, 2); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_STREQ(e.what(),
               "global batch 10 is not divisible by ranks x microbatches (3 x 2 = 6); pick a "
               "multiple of 6");
}

TEST(BatchSplit, RejectsNonPositiveSizes) {
  EXPECT_EQ(error_of([] { split_batch(0, 1, 1); }).what(),
            std::string("--global-batch must be positive (got 0)"));
  EXPECT_EQ(error_of([] { split_batch(8, 2, 0); }).what(),
            std::string("--microbatches must be positive (got 0)"));
  EXPECT_EQ(error_of([] { split_batch(8, 2, 0); }).code(), ExitCode::kUsage);
}

TEST(BatchSplit, RankMicrobatchBlocksTileTheStep) {
  const BatchSplit split = split_batch(24, 3, 2);
  EXPECT_EQ(split.per_rank(), 8);
  EXPECT_EQ(split.per_microbatch(), 4);
  EXPECT_EQ(split.first_sample(0, 0, 0), 0);
  EXPECT_EQ(split.first_sample(0, 0, 1), 4);
  EXPECT_EQ(split.first_sample(0, 1, 0), 8);
  EXPECT_EQ(split.first_sample(2, 2, 1), 48 + 16 + 4);
}

TEST(SyntheticData, GlobalBatchDoesNotDependOnWorldSize) {
  expect_world_size_independent(synthetic_tokens());
  expect_world_size_independent(synthetic_floats());
}

TEST(SyntheticData, TokensAreBelowVocabularyWithNextTokenTargets) {
  const Batch b = open_data(synthetic_tokens(), 0, 1)->batch(0, 0);
  EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{24, 8}));
  EXPECT_EQ(b.input.scalar_type(), at::kLong);
  EXPECT_GE(b.input.min().item<int64_t>(), 0);
  EXPECT_LT(b.input.max().item<int64_t>(), 50);
  EXPECT_TRUE(b.input.narrow(1, 1, 7).equal(b.target.narrow(1, 0, 7)));
  EXPECT_GT(std::get<0>(at::_unique(b.input)).numel(), 40);
}

TEST(SyntheticData, MultiDimensionalTokensShiftAlongTheLastDim) {
  DataConfig config = synthetic_tokens();
  config.sample_shape = {2, 5};
  const Batch b = open_data(config, 0, 1)->batch(1, 0);
  EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{24, 2, 5}));
  EXPECT_TRUE(b.input.narrow(2, 1, 4).equal(b.target.narrow(2, 0, 4)));
}

TEST(SyntheticData, SeqLenStandsInForTheShapeOfTokens) {
  DataConfig config = synthetic_tokens();
  config.sample_shape.clear();
  config.seq_len = 12;
  EXPECT_EQ(open_data(config, 0, 1)->batch(0, 0).input.sizes(), (std::vector<int64_t>{24, 12}));
}

TEST(SyntheticData, FloatsAreStandardNormalWithoutTargets) {
  DataConfig config = synthetic_floats();
  config.global_batch = 256;
  const Batch b = open_data(config, 0, 1)->batch(0, 0);
  EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{256, 3, 4, 4}));
  EXPECT_EQ(b.input.scalar_type(), at::kFloat);
  EXPECT_FALSE(b.target.defined());
  EXPECT_NEAR(b.input.mean().item<double>(), 0.0, 0.05);
  EXPECT_NEAR(b.input.std().item<double>(), 1.0, 0.05);
}

TEST(SyntheticData, SameSeedSameBatchesOtherSeedOthers) {
  for (const DataConfig& config : {synthetic_tokens(), synthetic_floats()}) {
    expect_same(open_data(config, 1, 2)->batch(3, 0), open_data(config, 1, 2)->batch(3, 0));
    DataConfig other = config;
    other.seed = 8;
    EXPECT_FALSE(open_data(config, 0, 1)
                     ->batch(0, 0)
                     .input.equal(open_data(other, 0, 1)->batch(0, 0).input));
    EXPECT_FALSE(open_data(config, 0, 1)
                     ->batch(0, 0)
                     .input.equal(open_data(config, 0, 1)->batch(1, 0).input));
  }
}

TEST(SyntheticData, RejectsBadSettings) {
  DataConfig config = synthetic_tokens();
  config.input_dtype = "float16";
  Error e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_STREQ(e.what(), "unknown --input-dtype 'float16'; pass int64 (token ids) or float32");

  config = synthetic_floats();
  config.sample_shape.clear();
  e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_STREQ(e.what(),
               "synthetic data needs --input-shape, one sample's shape (e.g. 64 for 64 tokens or "
               "3,32,32 for an image)");

  config = synthetic_tokens();
  config.kind = "images";
  e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_STREQ(e.what(),
               "unknown data kind 'images'; pass --data-kind synthetic, text, tokens or "
               "tensors");

  config = synthetic_tokens();
  config.global_batch = 10;
  config.microbatches = 2;
  e = error_of([&] { open_data(config, 0, 3); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_STREQ(e.what(),
               "global batch 10 is not divisible by ranks x microbatches (3 x 2 = 6); pick a "
               "multiple of 6");
}

TEST(DataKind, InferredFromTheExtension) {
  EXPECT_EQ(infer_data_kind("synthetic"), "synthetic");
  EXPECT_EQ(infer_data_kind("data/corpus.txt"), "text");
  EXPECT_EQ(infer_data_kind("/data/owt/train.bin"), "tokens");
  EXPECT_EQ(infer_data_kind("cifar.pt"), "tensors");
  EXPECT_EQ(infer_data_kind("cifar.pth"), "tensors");
  const std::string dir = ::testing::TempDir() + "/v1.2";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/corpus") << "text";
  const Error e = error_of([&] { infer_data_kind(dir + "/corpus"); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_EQ(std::string(e.what()),
            "cannot tell the kind of data file " + dir +
                "/corpus from its extension (.txt text, .bin tokens, .pt tensors); pass "
                "--data-kind text|tokens|tensors");
  // A name with a typo in its extension is a missing file first.
  const Error missing = error_of([] { infer_data_kind("examples/tiny_corpus.tx"); });
  EXPECT_EQ(missing.code(), ExitCode::kIo);
  EXPECT_STREQ(missing.what(),
               "cannot read data file examples/tiny_corpus.tx: No such file or directory; check "
               "the --data path");
}

TEST_F(DataFiles, TextSamplesAreWindowsOfTheFile) {
  const std::string text = text_corpus();
  const DataConfig config = file_config("text", write("corpus.txt", text));
  const std::vector<int64_t> bytes(text.begin(), text.end());
  const Batch b = open_data(config, 0, 1)->batch(0, 0);
  EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{24, 6}));
  expect_windows_of(bytes, b);
  expect_world_size_independent(config);
  EXPECT_EQ(open_data(config, 0, 1)->describe(),
            "text " + config.path + " (" + std::to_string(text.size()) + " bytes, largest id " +
                std::to_string(*std::max_element(bytes.begin(), bytes.end())) +
                "), windows of 7, seed 7");
}

TEST_F(DataFiles, TextSameSeedSameWindowsOtherSeedOthers) {
  DataConfig config = file_config("text", write("corpus.txt", text_corpus()));
  expect_same(open_data(config, 0, 1)->batch(1, 0), open_data(config, 0, 1)->batch(1, 0));
  DataConfig other = config;
  other.seed = 99;
  EXPECT_FALSE(
      open_data(config, 0, 1)->batch(1, 0).input.equal(open_data(other, 0, 1)->batch(1, 0).input));
}

TEST_F(DataFiles, TextErrors) {
  DataConfig config = file_config("text", (dir_ / "missing.txt").string());
  Error e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kIo);
  EXPECT_EQ(e.what(), "cannot read data file " + config.path +
                          ": No such file or directory; check the --data path");

  config.path = write("short.txt", "abcdef");
  e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_EQ(e.what(), config.path +
                          " has 6 bytes but --seq-len 6 needs at least 7 bytes (one window of "
                          "seq_len + 1); use a longer file or a smaller --seq-len");

  config.path = write("high.txt", "abcdefgh\xc3\xa9");
  config.vocab_size = 128;
  e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_EQ(e.what(), "byte 195 at position 8 of " + config.path +
                          " is >= the vocabulary size 128; pass --vocab-size or check the file");

  config.seq_len = 0;
  e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_STREQ(e.what(), "text data needs --seq-len, the tokens per sample (got 0)");
}

TEST_F(DataFiles, TokenFilesHoldLittleEndianUint16) {
  std::vector<uint16_t> ids;
  for (int i = 0; i < 400; ++i) ids.push_back(static_cast<uint16_t>((i * 7919) % 50257));
  DataConfig config = file_config("tokens", write_tokens("train.bin", ids));
  config.vocab_size = 50257;
  const Batch b = open_data(config, 0, 1)->batch(0, 0);
  EXPECT_GT(b.input.max().item<int64_t>(), 255);
  expect_windows_of(std::vector<int64_t>(ids.begin(), ids.end()), b);
  expect_world_size_independent(config);
}

TEST_F(DataFiles, TokenIdAboveVocabularyIsRejectedAtOpen) {
  std::vector<uint16_t> ids(2000, 17);
  ids[1234] = 50300;
  DataConfig config = file_config("tokens", write_tokens("train.bin", ids));
  config.vocab_size = 50257;
  const Error e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_EQ(e.what(), "token id 50300 at position 1234 of " + config.path +
                          " is >= the vocabulary size 50257; pass --vocab-size or check the file");
}

TEST_F(DataFiles, TokenFileOfOddSizeIsRejected) {
  DataConfig config = file_config("tokens", write("odd.bin", std::string(41, '\1')));
  const Error e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_EQ(e.what(), config.path +
                          " has 41 bytes, an odd number, but a tokens file holds 2-byte "
                          "little-endian uint16 ids; check the file or pass --data-kind");
}

TEST_F(DataFiles, ShortTokenFileSaysHowLongItMustBe) {
  DataConfig config = file_config("tokens", write_tokens("short.bin", {1, 2, 3}));
  const Error e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_EQ(e.what(), config.path +
                          " has 3 tokens but --seq-len 6 needs at least 7 tokens (one window of "
                          "seq_len + 1); use a longer file or a smaller --seq-len");
}

// Row k of the fixtures is [k, k + 0.25, k + 0.5] with target k % 3 (make_data.py).
void expect_fixture_rows(const Batch& b) {
  for (int64_t i = 0; i < b.input.size(0); ++i) {
    const float k = b.input[i][0].item<float>();
    EXPECT_TRUE(b.input[i].equal(torch::tensor({k, k + 0.25f, k + 0.5f})));
    if (b.target.defined()) {
      EXPECT_EQ(b.target[i].item<int64_t>(), static_cast<int64_t>(k) % 3);
    }
  }
}

std::vector<int64_t> rows_of(const Batch& b) {
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < b.input.size(0); ++i) rows.push_back(b.input[i][0].item<int64_t>());
  return rows;
}

TEST(TensorData, TupleAndDictFilesGiveTheSameRows) {
  DataConfig config = file_config("tensors", kFixtures + "tuple.pt");
  const Batch from_tuple = open_data(config, 0, 1)->batch(0, 0);
  config.path = kFixtures + "dict.pt";
  const Batch from_dict = open_data(config, 0, 1)->batch(0, 0);
  expect_same(from_tuple, from_dict);
  EXPECT_EQ(from_tuple.input.sizes(), (std::vector<int64_t>{24, 3}));
  EXPECT_EQ(from_tuple.target.scalar_type(), at::kLong);
  expect_fixture_rows(from_tuple);
}

TEST(TensorData, EveryEpochSeesEveryRowOnceInItsOwnOrder) {
  DataConfig config = file_config("tensors", kFixtures + "tuple.pt");
  config.global_batch = 5;  // one epoch of the 5 rows per step
  auto data = open_data(config, 0, 1);
  std::set<std::vector<int64_t>> orders;
  for (int64_t step = 0; step < 4; ++step) {
    std::vector<int64_t> rows = rows_of(data->batch(step, 0));
    orders.insert(rows);
    std::sort(rows.begin(), rows.end());
    EXPECT_EQ(rows, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  }
  EXPECT_GT(orders.size(), 1u);
}

TEST(TensorData, MicrobatchLargerThanTheFileWrapsOverEpochs) {
  DataConfig config = file_config("tensors", kFixtures + "tuple.pt");
  expect_world_size_independent(config);
  const std::vector<int64_t> rows = rows_of(open_data(config, 0, 1)->batch(0, 0));
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    std::vector<int64_t> seen(rows.begin() + epoch * 5, rows.begin() + epoch * 5 + 5);
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4})) << "epoch " << epoch;
  }
  DataConfig other = config;
  other.seed = 8;
  EXPECT_NE(rows, rows_of(open_data(other, 0, 1)->batch(0, 0)));
}

TEST(TensorData, TargetsAreOptional) {
  for (const char* name : {"inputs_only.pt", "bare.pt"}) {
    SCOPED_TRACE(name);
    const Batch b = open_data(file_config("tensors", kFixtures + name), 0, 1)->batch(0, 0);
    EXPECT_FALSE(b.target.defined());
    EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{24, 3}));
    expect_fixture_rows(b);
  }
}

TEST(TensorData, OneKeyDictSaysHowToSaveInstead) {
#if TORCH_VERSION_MAJOR >= 2
  GTEST_SKIP() << "LibTorch 2.x's unpickler has SETITEM and reads a one-key dict";
#endif
  const DataConfig config = file_config("tensors", kFixtures + "one_key_dict.pt");
  const Error e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_EQ(e.what(), config.path +
                          ": holds a dict with one key, which LibTorch cannot read; save "
                          "(inputs,) or the bare inputs tensor instead");
}

TEST(TensorData, RejectsEmptyMismatchedAndForeignFiles) {
  DataConfig config = file_config("tensors", kFixtures + "empty.pt");
  Error e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_EQ(e.what(), config.path + ": no rows (inputs [0, 3]); save at least one sample");

  config.path = kFixtures + "mismatched.pt";
  e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_EQ(e.what(),
            config.path + ": inputs have 5 rows but targets 4; save one target per input row");

  config.path = kFixtures + "not_tensors.pt";
  e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_EQ(e.what(), config.path +
                          ": holds a sequence of 3 items; save (inputs, targets) or "
                          "(inputs,)");

  config.path = kFixtures + "../make_data.py";
  e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_EQ(std::string(e.what()).rfind(config.path + ": not a file written by torch.save (", 0),
            0u)
      << e.what();
  EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);

  config.path = kFixtures + "missing.pt";
  e = error_of([&] { open_data(config, 0, 1); });
  EXPECT_EQ(e.code(), ExitCode::kIo);
  EXPECT_EQ(e.what(), "cannot read data file " + config.path +
                          ": No such file or directory; check the --data path");
}

}  // namespace
}  // namespace mfsdp::executor
