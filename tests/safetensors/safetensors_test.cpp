#include "safetensors/safetensors.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <set>

#include "schema/error.h"
#include "schema/plan.h"
#include "tests/executor/train/error_of.h"

namespace mfsdp::safetensors {
namespace {

namespace fs = std::filesystem;
using mfsdp::testing::error_of;

const std::string kFixtures = std::string(MFSDP_SOURCE_DIR) + "/tests/fixtures/safetensors";

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "mfsdp-safetensors-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) std::abort();
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

  std::set<std::string> names() const {
    std::set<std::string> out;
    for (const auto& entry : fs::directory_iterator(path_)) out.insert(entry.path().filename());
    return out;
  }

 private:
  std::string path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A safetensors file made by hand from header text and data, not by the writer under test.
std::string file_bytes(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

// The Error opening a file of this header and data gives; its message must name the file.
Error file_error(const std::string& header, const std::string& data = "") {
  TempDir dir;
  const std::string path = dir / "bad.safetensors";
  write_bytes(path, file_bytes(header, data));
  Error error = error_of([&] { File file(path); });
  EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
  EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << error.what();
  return error;
}

std::string tensor(const std::string& name, const std::string& dtype, const std::string& shape,
                   uint64_t begin, uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

#define EXPECT_MESSAGE_HAS(error, text) \
  EXPECT_NE(std::string((error).what()).find(text), std::string::npos) << (error).what()

// What make_safetensors_fixtures.py writes: element i of the tensor with seed k.
struct Expected {
  std::string name;
  Dtype dtype;
  std::vector<int64_t> shape;
  int seed;
};

const std::vector<Expected> kMixed = {
    {"model.embed_tokens.weight", Dtype::kF32, {4, 3}, 1},
    {"model.layers.0.input_layernorm.weight", Dtype::kF16, {5}, 2},
    {"model.layers.0.self_attn.q_proj.weight", Dtype::kBF16, {2, 3}, 3},
    {"model.layers.0.self_attn.q_proj.bias", Dtype::kF64, {3}, 4},
    {"model.layers.0.mlp.gate.weight", Dtype::kI32, {2, 2}, 5},
    {"model.layers.0.mlp.counts", Dtype::kI16, {3}, 6},
    {"optimizer.step", Dtype::kI64, {}, 7},
    {"model.tokens", Dtype::kU8, {4}, 8},
    {"model.deltas", Dtype::kI8, {3}, 9},
    {"model.mask", Dtype::kBool, {5}, 10},
    {"model.empty_rows", Dtype::kF32, {0, 3}, 11},
    {"model.lm_head.weight", Dtype::kF32, {3, 2}, 12},
    {"model.position_ids", Dtype::kI64, {1, 4}, 13},
};

const std::vector<Expected> kSharded = {
    {"model.embed_tokens.weight", Dtype::kF32, {16, 4}, 1},
    {"model.layers.0.self_attn.qkv.weight", Dtype::kBF16, {6, 4}, 2},
    {"model.layers.0.self_attn.qkv.bias", Dtype::kF32, {6}, 3},
    {"model.layers.0.mlp.fc.weight", Dtype::kF16, {4, 8}, 4},
    {"model.layers.0.mlp.fc.bias", Dtype::kF32, {8}, 5},
    {"model.layers.1.self_attn.qkv.weight", Dtype::kBF16, {6, 4}, 6},
    {"model.layers.1.mlp.fc.weight", Dtype::kF16, {4, 8}, 7},
    {"model.norm.weight", Dtype::kF32, {4}, 8},
    {"lm_head.weight", Dtype::kF32, {4, 4}, 9},
};
const std::vector<std::string> kShardFiles = {"model-00001-of-00003.safetensors",
                                              "model-00002-of-00003.safetensors",
                                              "model-00003-of-00003.safetensors"};
const std::vector<size_t> kShardOf = {0, 1, 1, 1, 1, 2, 2, 2, 2};

template <typename T>
T element(const uint8_t* data, int64_t i) {
  T value;
  std::memcpy(&value, data + i * sizeof(T), sizeof(T));
  return value;
}

double half_to_double(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1F;
  const double mantissa = bits & 0x3FF;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024.0 + mantissa, exponent - 25);
}

void expect_values(const uint8_t* data, const Expected& expected) {
  const int64_t k = expected.seed;
  int64_t count = 1;
  for (int64_t dim : expected.shape) count *= dim;
  for (int64_t i = 0; i < count; ++i) {
    const double real = k + (i - 3) * 0.25;
    const int64_t byte = (10 * k + 37 * i) % 256;
    SCOPED_TRACE(expected.name + "[" + std::to_string(i) + "]");
    switch (expected.dtype) {
      case Dtype::kF32:
        EXPECT_EQ(element<float>(data, i), real);
        break;
      case Dtype::kF64:
        EXPECT_EQ(element<double>(data, i), real);
        break;
      case Dtype::kF16:
        EXPECT_EQ(half_to_double(element<uint16_t>(data, i)), real);
        break;
      case Dtype::kBF16: {
        const uint32_t bits = static_cast<uint32_t>(element<uint16_t>(data, i)) << 16;
        float value;
        std::memcpy(&value, &bits, sizeof value);
        EXPECT_EQ(value, real);
        break;
      }
      case Dtype::kI16:
        EXPECT_EQ(element<int16_t>(data, i), k * 100 - 7 * i);
        break;
      case Dtype::kI32:
        EXPECT_EQ(element<int32_t>(data, i), k * 100 - 7 * i);
        break;
      case Dtype::kI64:
        EXPECT_EQ(element<int64_t>(data, i), k * (int64_t{1} << 40) - 7 * i);
        break;
      case Dtype::kU8:
        EXPECT_EQ(element<uint8_t>(data, i), byte);
        break;
      case Dtype::kI8:
        EXPECT_EQ(element<int8_t>(data, i), byte - 128);
        break;
      case Dtype::kBool:
        EXPECT_EQ(element<uint8_t>(data, i), (i + k) % 2 == 0 ? 1 : 0);
        break;
      default:
        ADD_FAILURE() << "the fixtures hold no " << dtype_name(expected.dtype);
    }
  }
}

void expect_tensor(const File& file, const TensorInfo* info, const Expected& expected) {
  ASSERT_NE(info, nullptr) << expected.name << " is not in " << file.path();
  EXPECT_EQ(info->dtype, expected.dtype) << expected.name;
  EXPECT_EQ(info->shape, expected.shape) << expected.name;
  EXPECT_EQ(info->byte_size(), info->numel() * item_size(expected.dtype)) << expected.name;
  // The reference writer aligns every tensor to its element size.
  EXPECT_EQ(info->begin % item_size(expected.dtype), 0u) << expected.name;
  expect_values(file.data(*info), expected);
}

TEST(SafetensorsFixture, MixedFileHoldsTheNamesDtypesShapesAndValuesPythonWrote) {
  const File file(kFixtures + "/mixed.safetensors");
  ASSERT_EQ(file.tensors().size(), kMixed.size());
  for (const Expected& expected : kMixed) expect_tensor(file, file.find(expected.name), expected);
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(file.header().data_begin % 8, 0u);
  EXPECT_EQ(file.find("model.nothing"), nullptr);
  // File order: by offset, the largest alignment first, as the reference writes them.
  EXPECT_EQ(file.tensors().front().name, "model.position_ids");
  EXPECT_EQ(file.tensors().back().name, "model.mask");
  for (size_t i = 1; i < file.tensors().size(); ++i) {
    EXPECT_EQ(file.tensors()[i].begin, file.tensors()[i - 1].end);
  }
  EXPECT_EQ(file.tensors().back().end, file.size());
}

TEST(SafetensorsFixture, ShardedDirectoryReadsThroughItsIndex) {
  const Checkpoint checkpoint(kFixtures + "/sharded");
  ASSERT_EQ(checkpoint.files().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(checkpoint.files()[i]->path(), kFixtures + "/sharded/" + kShardFiles[i]);
  }
  ASSERT_EQ(checkpoint.tensors().size(), kSharded.size());
  for (size_t i = 0; i < kSharded.size(); ++i) {
    const Checkpoint::Entry& entry = checkpoint.at(kSharded[i].name);
    EXPECT_EQ(entry.file, checkpoint.files()[kShardOf[i]].get()) << kSharded[i].name;
    expect_tensor(*entry.file, entry.info, kSharded[i]);
  }
  EXPECT_EQ(checkpoint.find("model.nothing"), nullptr);
  const Error error = error_of([&] { checkpoint.at("model.nothing"); });
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "\"model.nothing\"");
}

TEST(SafetensorsFixture, CheckpointOfOneFileOrOfADirectoryWithOneFile) {
  const Checkpoint file(kFixtures + "/mixed.safetensors");
  EXPECT_EQ(file.tensors().size(), kMixed.size());
  TempDir dir;
  fs::copy_file(kFixtures + "/mixed.safetensors", dir / "weights.safetensors");
  write_bytes(dir / "config.json", "{}");
  const Checkpoint directory(dir.path());
  ASSERT_EQ(directory.files().size(), 1u);
  EXPECT_EQ(directory.files()[0]->path(), dir / "weights.safetensors");
  EXPECT_EQ(directory.tensors().size(), kMixed.size());
}

TEST(SafetensorsFixture, ParseHeaderNeedsOnlyTheLengthAndHeaderBytes) {
  const std::string bytes = read_bytes(kFixtures + "/mixed.safetensors");
  const File file(kFixtures + "/mixed.safetensors");
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const Header header = parse_header(data, file.header().data_begin, bytes.size(), "mixed");
  ASSERT_EQ(header.tensors.size(), file.tensors().size());
  for (size_t i = 0; i < header.tensors.size(); ++i) {
    EXPECT_EQ(header.tensors[i].name, file.tensors()[i].name);
    EXPECT_EQ(header.tensors[i].begin, file.tensors()[i].begin);
    EXPECT_EQ(header.tensors[i].end, file.tensors()[i].end);
  }
  EXPECT_EQ(error_of([&] { parse_header(data, 20, bytes.size(), "mixed"); }).code(),
            ExitCode::kInternal);
}

TEST(SafetensorsFixture, ReleasedPagesReadTheSameBytesAgain) {
  const File file(kFixtures + "/mixed.safetensors");
  const TensorInfo& first = file.tensors().front();
  const std::string before(reinterpret_cast<const char*>(file.data(first)), first.byte_size());
  file.release(0, file.size());
  file.release(first);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file.data(first)), first.byte_size()),
            before);
}

TEST(SafetensorsDtype, NamesRoundTripAndMatchMfsdpsDtypeTable) {
  for (const char* name : {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16",
                           "I32", "U32", "F32", "F64", "I64", "U64"}) {
    const std::optional<Dtype> dtype = dtype_from_string(name);
    ASSERT_TRUE(dtype) << name;
    EXPECT_STREQ(dtype_name(*dtype), name);
  }
  for (const char* name : {"F33", "bf16", "C64", "F4", "F8_E8M0", ""}) {
    EXPECT_FALSE(dtype_from_string(name)) << name;
  }
  for (const std::string& name : schema::dtype_names()) {
    const std::optional<Dtype> dtype = dtype_from_schema(name);
    ASSERT_TRUE(dtype) << name;
    EXPECT_EQ(schema_dtype(*dtype), name);
    EXPECT_EQ(static_cast<int64_t>(item_size(*dtype)), schema::dtype_size(name)) << name;
  }
  EXPECT_EQ(dtype_from_schema("bfloat16"), Dtype::kBF16);
  EXPECT_EQ(schema_dtype(Dtype::kU64), std::nullopt);
  EXPECT_EQ(dtype_from_schema("BF16"), std::nullopt);
}

// ---- bad files: each names the file, the tensor and what is wrong

TEST(SafetensorsBadFile, RefusesATruncatedFile) {
  TempDir dir;
  const std::string path = dir / "cut.safetensors";
  write_bytes(path, read_bytes(kFixtures + "/mixed.safetensors").substr(0, 5));
  const Error error = error_of([&] { File file(path); });
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, path);
  EXPECT_MESSAGE_HAS(error, "5 bytes");
}

TEST(SafetensorsBadFile, RefusesAFileCutInsideItsData) {
  TempDir dir;
  const std::string path = dir / "cut.safetensors";
  const std::string bytes = read_bytes(kFixtures + "/mixed.safetensors");
  write_bytes(path, bytes.substr(0, bytes.size() - 2));
  const Error error = error_of([&] { File file(path); });
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, path);
  EXPECT_MESSAGE_HAS(error, "\"model.mask\"");
  EXPECT_MESSAGE_HAS(error, "past the end of the data area");
}

TEST(SafetensorsBadFile, RefusesAHeaderLengthBeyondTheFile) {
  TempDir dir;
  const std::string path = dir / "long.safetensors";
  std::string bytes = file_bytes("{}      ");
  bytes[0] = static_cast<char>(200);
  write_bytes(path, bytes);
  const Error error = error_of([&] { File file(path); });
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, path);
  EXPECT_MESSAGE_HAS(error, "header of 200 bytes but has only 8");
}

TEST(SafetensorsBadFile, RefusesAHeaderLengthAbove100MB) {
  TempDir dir;
  const std::string path = dir / "huge.safetensors";
  std::string bytes = file_bytes("{}      ");
  const uint64_t length = 100'000'001;
  for (size_t i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
  write_bytes(path, bytes);
  const Error error = error_of([&] { File file(path); });
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, path);
  EXPECT_MESSAGE_HAS(error, "100000001 bytes, beyond the 100000000");
}

TEST(SafetensorsBadFile, RefusesOverlappingOffsets) {
  const Error error = file_error(
      "{" + tensor("a", "F32", "[2]", 0, 8) + "," + tensor("b", "F32", "[2]", 4, 12) + "}",
      std::string(12, '\0'));
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "tensor \"b\" (data_offsets [4, 12]) overlaps tensor \"a\"");
}

TEST(SafetensorsBadFile, RefusesOffsetsPastTheEnd) {
  const Error error = file_error(
      "{" + tensor("a", "F32", "[2]", 0, 8) + "," + tensor("b", "F32", "[2]", 8, 16) + "}",
      std::string(12, '\0'));
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "tensor \"b\" has data_offsets [8, 16] past the end");
}

TEST(SafetensorsBadFile, RefusesAGapBetweenTensors) {
  const Error error = file_error(
      "{" + tensor("a", "F32", "[2]", 0, 8) + "," + tensor("b", "F32", "[2]", 12, 20) + "}",
      std::string(20, '\0'));
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "4 bytes before tensor \"b\"");
  EXPECT_MESSAGE_HAS(error, "\"a\", ends at 8");
}

TEST(SafetensorsBadFile, RefusesBytesAfterTheLastTensor) {
  const Error error =
      file_error("{" + tensor("a", "F32", "[2]", 0, 8) + "}", std::string(12, '\0'));
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "the last 4 bytes of the file belong to no tensor");
  EXPECT_MESSAGE_HAS(error, "\"a\"");
}

TEST(SafetensorsBadFile, RefusesAByteCountThatDisagreesWithDtypeAndShape) {
  const Error error = file_error("{" + tensor("w", "F32", "[3]", 0, 8) + "}", std::string(8, '\0'));
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error,
                     "tensor \"w\" is F32 [3], 12 bytes, but its data_offsets [0, 8] hold 8");
}

TEST(SafetensorsBadFile, RefusesAnUnknownDtype) {
  const Error error = file_error("{" + tensor("w", "F33", "[2]", 0, 8) + "}", std::string(8, '\0'));
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "tensor \"w\" has dtype \"F33\", which mfsdp does not read");
}

TEST(SafetensorsBadFile, RefusesATensorNameListedTwice) {
  // nlohmann's parser would keep the second silently.
  const Error error =
      file_error("{" + tensor("w", "U8", "[2]", 0, 2) + "," + tensor("w", "U8", "[2]", 2, 4) + "}",
                 std::string(4, '\0'));
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "tensor \"w\" appears twice");
}

TEST(SafetensorsBadFile, RefusesAFieldListedTwice) {
  const Error error =
      file_error(R"({"w":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", "x");
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "tensor \"w\" lists \"dtype\" twice");
}

TEST(SafetensorsBadFile, RefusesAHeaderThatIsNotAJsonObject) {
  EXPECT_MESSAGE_HAS(file_error("[1, 2]  "), "does not start with '{'");
  EXPECT_MESSAGE_HAS(file_error(" {}     "), "does not start with '{'");
  const Error error = file_error("{\"w\":   ");
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "the header is not valid JSON");
}

TEST(SafetensorsBadFile, RefusesATensorThatIsNotAnObject) {
  const Error error = file_error(R"({"w":5})");
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "tensor \"w\" is 5, not an object");
}

TEST(SafetensorsBadFile, RefusesMissingAndExtraFields) {
  EXPECT_MESSAGE_HAS(file_error(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", "x"),
                     "tensor \"w\" has no shape");
  const Error extra =
      file_error(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"offset":0}})", "x");
  EXPECT_EQ(extra.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(extra, "tensor \"w\" has a field \"offset\"");
}

TEST(SafetensorsBadFile, RefusesNumbersThatAreNotSizes) {
  EXPECT_MESSAGE_HAS(file_error("{" + tensor("w", "U8", "[-1]", 0, 0) + "}"),
                     "tensor \"w\" has shape [-1] with -1");
  EXPECT_MESSAGE_HAS(file_error("{" + tensor("w", "U8", "[1.5]", 0, 0) + "}"),
                     "tensor \"w\" has shape [1.5]");
  EXPECT_MESSAGE_HAS(file_error(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1.0]}})", "x"),
                     "tensor \"w\" has data_offsets [0,1.0], not two non-negative integers");
  EXPECT_MESSAGE_HAS(file_error(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "x"),
                     "tensor \"w\" has data_offsets [0]");
  EXPECT_MESSAGE_HAS(file_error("{" + tensor("w", "U8", "[1]", 1, 0) + "}", "x"),
                     "tensor \"w\" has data_offsets [1, 0] ending before they begin");
}

TEST(SafetensorsBadFile, RefusesAShapeWhoseByteSizeOverflows) {
  // As the reference does, even though the 0 makes the product 0.
  const Error error = file_error("{" + tensor("w", "F32", "[4294967296,4294967296,0]", 0, 0) + "}");
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error,
                     "tensor \"w\" has shape [4294967296, 4294967296, 0], whose element "
                     "or byte count overflows int64");
  // Stricter than the reference, which multiplies in 64 unsigned bits: numel() must not
  // overflow int64 on its way to the 0.
  EXPECT_MESSAGE_HAS(file_error("{" + tensor("w", "F32", "[4294967295,4294967296,0]", 0, 0) + "}"),
                     "overflows int64");
  EXPECT_MESSAGE_HAS(file_error("{" + tensor("w", "F64", "[2305843009213693952]", 0, 0) + "}"),
                     "overflows int64");
}

TEST(SafetensorsBadFile, RefusesANulByteInTheHeader) {
  // Padding of NULs instead of spaces: nlohmann's parser would stop at the first and accept the
  // header, the reference refuses it.
  const Error error = file_error(std::string("{}") + std::string(6, '\0'));
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "the header holds a NUL byte at byte 2");
}

TEST(SafetensorsBadFile, RefusesAnEmptyTensorNameAndNonStringMetadata) {
  EXPECT_MESSAGE_HAS(file_error("{" + tensor("", "U8", "[1]", 0, 1) + "}", "x"),
                     "a tensor has an empty name");
  EXPECT_MESSAGE_HAS(file_error(R"({"__metadata__":{"format":1}})"),
                     "__metadata__ \"format\" is 1, not a string");
  EXPECT_MESSAGE_HAS(file_error(R"({"__metadata__":[]})"), "__metadata__ is [], not an object");
}

TEST(SafetensorsFile, AcceptsNullMetadataEmptyTensorsAndNoTensors) {
  TempDir dir;
  write_bytes(
      dir / "empty.safetensors",
      file_bytes(R"({"__metadata__":null,)" + tensor("z", "F32", "[0]", 0, 0) + "," +
                     tensor("e", "F32", "[2,0]", 0, 0) + "," + tensor("s", "U8", "[]", 0, 1) + "}",
                 "x"));
  const File file(dir / "empty.safetensors");
  ASSERT_EQ(file.tensors().size(), 3u);
  EXPECT_EQ(file.tensors()[0].name, "e");  // equal offsets: by name
  EXPECT_EQ(file.tensors()[1].name, "z");
  EXPECT_EQ(file.tensors()[2].numel(), 1);
  EXPECT_TRUE(file.metadata().empty());
  write_bytes(dir / "none.safetensors", file_bytes("{}      "));
  EXPECT_TRUE(File(dir / "none.safetensors").tensors().empty());
}

TEST(SafetensorsFile, AMissingPathOrADirectoryIsAnIoError) {
  TempDir dir;
  const Error missing = error_of([&] { File file(dir / "nope.safetensors"); });
  EXPECT_EQ(missing.code(), ExitCode::kIo);
  EXPECT_MESSAGE_HAS(missing, dir / "nope.safetensors");
  EXPECT_MESSAGE_HAS(missing, std::strerror(ENOENT));
  EXPECT_EQ(error_of([&] { File file(dir.path()); }).code(), ExitCode::kIo);
  EXPECT_EQ(error_of([&] { Checkpoint checkpoint(dir / "nope"); }).code(), ExitCode::kIo);
}

// ---- checkpoint directories and their index

class ShardedCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& name : kShardFiles) {
      fs::copy_file(kFixtures + "/sharded/" + name, dir_ / name);
    }
    index_ = read_bytes(kFixtures + "/sharded/model.safetensors.index.json");
    write_bytes(index_path(), index_);
  }
  std::string index_path() const { return dir_ / kIndexFileName; }
  void edit_index(const std::string& from, const std::string& to) {
    const size_t at = index_.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    index_.replace(at, from.size(), to);
    write_bytes(index_path(), index_);
  }
  Error open_error() {
    Error error = error_of([&] { Checkpoint checkpoint(dir_.path()); });
    EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << error.what();
    return error;
  }

  TempDir dir_;
  std::string index_;
};

TEST_F(ShardedCopy, RefusesAnIndexNamingAMissingFile) {
  fs::remove(dir_ / kShardFiles[1]);
  const Error error = open_error();
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, index_path());
  EXPECT_MESSAGE_HAS(error, "\"model.layers.0.mlp.fc.bias\" to \"" + kShardFiles[1] + "\"");
  EXPECT_MESSAGE_HAS(error, "which is not in " + dir_.path());
}

TEST_F(ShardedCopy, RefusesAnIndexNamingAFileOutsideItsDirectory) {
  edit_index("\"lm_head.weight\": \"model-00003-of-00003.safetensors\"",
             "\"lm_head.weight\": \"../model-00003-of-00003.safetensors\"");
  const Error error = open_error();
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, index_path() +
                                " maps tensor \"lm_head.weight\" to "
                                "\"../model-00003-of-00003.safetensors\", which is "
                                "not a file name in the index's directory");
}

TEST_F(ShardedCopy, RefusesATensorTheIndexMapsToAFileWithoutIt) {
  edit_index("\"lm_head.weight\"",
             "\"ghost.weight\": \"model-00001-of-00003.safetensors\",\n "
             "\"lm_head.weight\"");
  const Error error = open_error();
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "maps tensor \"ghost.weight\" to " + (dir_ / kShardFiles[0]) +
                                ", which does not hold it");
}

TEST_F(ShardedCopy, RefusesATensorOfAFileThatTheIndexDoesNotList) {
  edit_index("\"lm_head.weight\": \"model-00003-of-00003.safetensors\",\n", "");
  const Error error = open_error();
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, (dir_ / kShardFiles[2]) + " holds tensor \"lm_head.weight\", which " +
                                index_path() + " does not list");
}

TEST_F(ShardedCopy, RefusesATensorMappedTwice) {
  edit_index("\"lm_head.weight\"",
             "\"lm_head.weight\": \"model-00001-of-00003.safetensors\",\n "
             "\"lm_head.weight\"");
  const Error error = open_error();
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "key \"lm_head.weight\" appears twice in \"weight_map\"");
}

TEST_F(ShardedCopy, RefusesAnIndexThatIsNotJsonOrHasNoWeightMap) {
  write_bytes(index_path(), "{\"weight_map\": ");
  EXPECT_MESSAGE_HAS(open_error(), index_path() + " is not valid JSON");
  write_bytes(index_path(), "{\"metadata\": {}}");
  EXPECT_MESSAGE_HAS(open_error(), "is not an object with a \"weight_map\" object");
  write_bytes(index_path(), "{\"weight_map\": {}}");
  EXPECT_MESSAGE_HAS(open_error(), "maps no tensors");
}

TEST_F(ShardedCopy, ReadsAnIndexWithMoreMetadataAsNewerTransformersWrites) {
  edit_index("\"total_size\": 616", "\"total_parameters\": 154,\n    \"total_size\": 616");
  const Checkpoint checkpoint(dir_.path());
  EXPECT_EQ(checkpoint.tensors().size(), kSharded.size());
  EXPECT_EQ(parse_index(index_, "index").total_size, 616u);
}

TEST_F(ShardedCopy, WithoutAnIndexSeveralFilesAreAmbiguous) {
  fs::remove(index_path());
  const Error error = open_error();
  EXPECT_EQ(error.code(), ExitCode::kUsage);
  EXPECT_MESSAGE_HAS(error, "holds 3 .safetensors files (" + kShardFiles[0]);
  for (const std::string& name : kShardFiles) fs::remove(dir_ / name);
  EXPECT_MESSAGE_HAS(open_error(), "holds neither model.safetensors.index.json nor a .safetensors");
}

// ---- the writer

// Writes every tensor of `source` (in `order`) through `writer`, in chunks of `chunk` bytes.
void copy_through(ShardedWriter& writer, const std::vector<Expected>& order,
                  const std::function<Checkpoint::Entry(const std::string&)>& source,
                  size_t chunk) {
  for (const Expected& expected : order) {
    writer.declare(expected.name, expected.dtype, expected.shape);
  }
  for (const Expected& expected : order) {
    const Checkpoint::Entry entry = source(expected.name);
    const uint8_t* data = entry.file->data(*entry.info);
    for (uint64_t done = 0; done < entry.info->byte_size(); done += chunk) {
      writer.write(expected.name, data + done,
                   std::min<uint64_t>(chunk, entry.info->byte_size() - done));
    }
  }
}

TEST(ShardedWriter, OneFileIsByteForBytePythonSafetensorsOutput) {
  const File mixed(kFixtures + "/mixed.safetensors");
  TempDir dir;
  ShardedWriter writer(dir.path(), 1 << 20);
  copy_through(
      writer, kMixed,
      [&](const std::string& name) {
        return Checkpoint::Entry{&mixed, mixed.find(name)};
      },
      5);
  writer.finish();
  EXPECT_EQ(writer.file_names(), std::vector<std::string>{kSingleFileName});
  EXPECT_EQ(dir.names(), std::set<std::string>{kSingleFileName});
  EXPECT_EQ(read_bytes(dir / kSingleFileName), read_bytes(kFixtures + "/mixed.safetensors"));
}

TEST(ShardedWriter, ShardsAndIndexAreByteForByteTransformersOutput) {
  const Checkpoint sharded(kFixtures + "/sharded");
  TempDir dir;
  ShardedWriter writer(dir.path(), 200);
  copy_through(
      writer, kSharded, [&](const std::string& name) { return sharded.at(name); }, 1000);
  writer.finish();
  EXPECT_EQ(writer.file_names(), kShardFiles);
  for (const std::string& name : kShardFiles) {
    EXPECT_EQ(read_bytes(dir / name), read_bytes(kFixtures + "/sharded/" + name)) << name;
  }
  EXPECT_EQ(read_bytes(dir / kIndexFileName),
            read_bytes(kFixtures + "/sharded/model.safetensors.index.json"));
}

TEST(ShardedWriter, RoundTripsThroughSeveralFilesUnderASmallCap) {
  struct Made {
    std::string name;
    Dtype dtype;
    std::vector<int64_t> shape;
    size_t file;
  };
  // Cap 64: a; b (a + b > 64); big alone (over the cap); the rest together.
  const std::vector<Made> made = {
      {"a", Dtype::kF32, {10}, 0},
      {"b", Dtype::kBF16, {3, 5}, 1},
      {"big", Dtype::kU8, {100}, 2},
      {"scalar", Dtype::kI64, {}, 3},
      {"empty", Dtype::kF16, {0, 4}, 3},
      {"layers.0.c", Dtype::kF64, {4}, 3},
      {"layers.0.mask", Dtype::kBool, {7}, 3},
  };
  const auto byte_of = [](size_t tensor, uint64_t i) {
    return static_cast<char>((tensor * 31 + i * 7) & 0xFF);
  };
  TempDir dir;
  ShardedWriter writer(dir.path(), 64);
  for (const Made& m : made) writer.declare(m.name, m.dtype, m.shape);
  for (size_t t = 0; t < made.size(); ++t) {
    int64_t numel = 1;
    for (int64_t dim : made[t].shape) numel *= dim;
    std::string bytes;
    for (uint64_t i = 0; i < numel * item_size(made[t].dtype); ++i) bytes += byte_of(t, i);
    for (size_t done = 0; done < bytes.size(); done += 7) {
      writer.write(made[t].name, bytes.data() + done, std::min<size_t>(7, bytes.size() - done));
    }
  }
  writer.finish();
  const std::vector<std::string> files = {
      "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
      "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"};
  EXPECT_EQ(writer.file_names(), files);
  std::set<std::string> expected_names(files.begin(), files.end());
  expected_names.insert(kIndexFileName);
  EXPECT_EQ(dir.names(), expected_names);

  const Checkpoint checkpoint(dir.path());
  ASSERT_EQ(checkpoint.tensors().size(), made.size());
  for (size_t t = 0; t < made.size(); ++t) {
    const Checkpoint::Entry& entry = checkpoint.at(made[t].name);
    EXPECT_EQ(entry.file->path(), dir / files[made[t].file]) << made[t].name;
    EXPECT_EQ(entry.info->dtype, made[t].dtype);
    EXPECT_EQ(entry.info->shape, made[t].shape);
    EXPECT_EQ(entry.info->begin % item_size(made[t].dtype), 0u) << made[t].name;
    EXPECT_EQ(entry.file->header().data_begin % 8, 0u);
    const char* data = reinterpret_cast<const char*>(entry.file->data(*entry.info));
    for (uint64_t i = 0; i < entry.info->byte_size(); ++i) {
      ASSERT_EQ(data[i], byte_of(t, i)) << made[t].name << " byte " << i;
    }
    EXPECT_EQ(entry.file->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  }
  const Index index = parse_index(read_bytes(dir / kIndexFileName), "index");
  EXPECT_EQ(index.total_size, 40u + 30 + 100 + 8 + 0 + 32 + 7);
  EXPECT_EQ(index.weight_map.at("big"), files[2]);
}

TEST(ShardedWriter, ATensorOfZeroBytesNeedsNoWriteAndNoTensorsMakeAnEmptyFile) {
  TempDir dir;
  {
    ShardedWriter writer(dir / "some", 100);
    writer.declare("z", Dtype::kF32, {0});
    writer.declare("a", Dtype::kU8, {2});
    writer.declare("y", Dtype::kF32, {3, 0});
    writer.write("a", "hi", 2);
    writer.write("y", nullptr, 0);
    writer.finish();
    const File file(dir / "some/model.safetensors");
    EXPECT_EQ(file.tensors().size(), 3u);
  }
  ShardedWriter writer(dir / "none", 100);
  writer.finish();
  EXPECT_TRUE(File(dir / "none/model.safetensors").tensors().empty());
}

TEST(ShardedWriter, DestroyedBeforeFinishLeavesNothingBehind) {
  TempDir dir;
  {
    ShardedWriter writer(dir.path(), 8);
    writer.declare("a", Dtype::kF32, {2});
    writer.declare("b", Dtype::kF32, {2});
    writer.declare("c", Dtype::kF32, {2});
    const float values[2] = {1, 2};
    writer.write("a", values, sizeof values);
    writer.write("b", values, 4);
  }
  EXPECT_TRUE(dir.names().empty());
}

TEST(ShardedWriter, RefusesMisuseAsAnInternalError) {
  TempDir dir;
  ShardedWriter writer(dir.path(), 100);
  writer.declare("a", Dtype::kU8, {4});
  writer.declare("b", Dtype::kU8, {4});
  Error error = error_of([&] { writer.write("b", "xxxx", 4); });
  EXPECT_EQ(error.code(), ExitCode::kInternal);
  EXPECT_MESSAGE_HAS(error, "write(\"b\") before \"a\" is complete (0 of 4 bytes)");
  error = error_of([&] { writer.declare("c", Dtype::kU8, {1}); });
  EXPECT_EQ(error.code(), ExitCode::kInternal);
  error = error_of([&] { writer.write("a", "xxxxx", 5); });
  EXPECT_EQ(error.code(), ExitCode::kInternal);
  EXPECT_MESSAGE_HAS(error, "5 bytes, beyond the declared 4");
  EXPECT_EQ(error_of([&] { writer.write("nope", "x", 1); }).code(), ExitCode::kInternal);
  writer.write("a", "xxxx", 4);
  EXPECT_EQ(error_of([&] { writer.write("a", "x", 1); }).code(), ExitCode::kInternal);
  writer.write("b", "xx", 2);
  error = error_of([&] { writer.finish(); });
  EXPECT_EQ(error.code(), ExitCode::kInternal);
  EXPECT_MESSAGE_HAS(error, "tensor \"b\" at 2 of its 4 bytes");
}

TEST(ShardedWriter, RefusesDeclarationsAFileCannotHold) {
  TempDir dir;
  ShardedWriter writer(dir.path(), 100);
  writer.declare("a", Dtype::kU8, {4});
  const std::vector<std::pair<std::function<void()>, std::string>> cases = {
      {[&] { writer.declare("a", Dtype::kU8, {1}); }, "tensor \"a\" is declared twice"},
      {[&] { writer.declare("", Dtype::kU8, {1}); }, "a tensor has an empty name"},
      {[&] {
         writer.declare("n", Dtype::kU8, {2, -1});
       },
       "tensor \"n\" has a negative dimension"},
      {[&] { writer.declare("__metadata__", Dtype::kU8, {1}); }, "cannot be stored"},
      {[&] { writer.declare("\xff", Dtype::kU8, {1}); }, "is not valid UTF-8"},
      {[&] { writer.declare("o", Dtype::kF64, {int64_t{1} << 61}); },
       "more elements or bytes than int64 holds"},
  };
  for (const auto& [body, message] : cases) {
    const Error error = error_of(body);
    EXPECT_EQ(error.code(), ExitCode::kUsage) << message;
    EXPECT_MESSAGE_HAS(error, message);
    EXPECT_MESSAGE_HAS(error, dir.path());
  }
  writer.declare("big", Dtype::kU8, {std::numeric_limits<int64_t>::max() - 4});
  EXPECT_MESSAGE_HAS(error_of([&] { writer.declare("more", Dtype::kU8, {1}); }),
                     "tensor \"more\" brings the tensors to more bytes than int64 holds");
  EXPECT_EQ(error_of([&] { ShardedWriter zero(dir.path(), 0); }).code(), ExitCode::kUsage);
  EXPECT_EQ(error_of([&] { ShardedWriter bad(dir / "no/such/dir", 1); }).code(), ExitCode::kIo);
}

TEST(ShardedWriter, AFailedWriteIsAnIoErrorNamingTheFileAndLeavesNothing) {
  TempDir dir;
  // A file size limit makes the write fail as a full disk would, even for root.
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  void (*handler)(int) = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = before;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  Error error(ExitCode::kOk, "");
  {
    ShardedWriter writer(dir.path(), 1 << 20);
    writer.declare("w", Dtype::kF32, {4096});
    const std::string bytes(4 * 4096, 'x');
    error = error_of([&] { writer.write("w", bytes.data(), bytes.size()); });
    EXPECT_EQ(error_of([&] { writer.finish(); }).code(), ExitCode::kInternal);
  }
  ::setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, handler);
  EXPECT_EQ(error.code(), ExitCode::kIo);
  EXPECT_MESSAGE_HAS(error, dir / kSingleFileName);
  EXPECT_MESSAGE_HAS(error, std::strerror(EFBIG));
  EXPECT_TRUE(dir.names().empty());
}

TEST(ShardedWriter, ReplacesAnEarlierExportAndRemovesWhatItLeft) {
  const Checkpoint sharded(kFixtures + "/sharded");
  TempDir dir;
  write_bytes(dir / "config.json", "{}");
  write_bytes(dir / "model-00009-of-00009.safetensors", "stale");
  {
    ShardedWriter writer(dir.path(), 200);
    copy_through(
        writer, kSharded, [&](const std::string& name) { return sharded.at(name); }, 64);
    writer.finish();
  }
  std::set<std::string> expected(kShardFiles.begin(), kShardFiles.end());
  expected.insert({kIndexFileName, "config.json"});
  EXPECT_EQ(dir.names(), expected);
  {
    ShardedWriter writer(dir.path(), 1 << 20);
    copy_through(
        writer, kSharded, [&](const std::string& name) { return sharded.at(name); }, 64);
    writer.finish();
  }
  EXPECT_EQ(dir.names(), (std::set<std::string>{kSingleFileName, "config.json"}));
  EXPECT_EQ(Checkpoint(dir.path()).tensors().size(), kSharded.size());
}

TEST(SafetensorsHeader, EncodeHeaderPadsWithSpacesToEightBytes) {
  const std::string bytes = encode_header({{"a", Dtype::kU8, {3}, 0, 3}}, {});
  const std::string json = R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})";
  ASSERT_EQ(bytes.size() % 8, 0u);
  EXPECT_EQ(bytes.substr(8), json + std::string(bytes.size() - 8 - json.size(), ' '));
  EXPECT_EQ(static_cast<uint8_t>(bytes[0]), bytes.size() - 8);
  const Header header = parse_header(reinterpret_cast<const uint8_t*>((bytes + "abc").data()),
                                     bytes.size() + 3, bytes.size() + 3, "encoded");
  ASSERT_EQ(header.tensors.size(), 1u);
  EXPECT_EQ(header.tensors[0].begin, bytes.size());
}

}  // namespace
}  // namespace mfsdp::safetensors
