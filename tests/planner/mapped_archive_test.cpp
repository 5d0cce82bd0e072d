// Loading a TorchScript file with its tensors mapped (planner/torchscript/mapped_archive.h)
// against LibTorch's own torch::jit::load of the same file.
#include "planner/torchscript/mapped_archive.h"

#include <unistd.h>

#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "planner/torchscript/host_memory.h"
#include "planner/torchscript/torch_model.h"
#include "planner/torchscript/zip_directory.h"
#include "tests/planner/test_support.h"

namespace mfsdp::planner {
namespace {

std::string mapped_test_path(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("mfsdp_mapped_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// Every parameter, buffer and tensor attribute by name, as the module holds it.
std::map<std::string, at::Tensor> mapped_test_tensors(const torch::jit::Module& module) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) out["param " + p.name] = p.value;
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out["buffer " + b.name] = b.value;
  for (const auto& a : module.named_attributes(/*recurse=*/true)) {
    if (a.value.isTensor()) out["attr " + a.name] = a.value.toTensor();
    if (a.value.isTensorList()) {
      const auto list = a.value.toTensorVector();
      for (size_t i = 0; i < list.size(); ++i) out["list " + a.name + std::to_string(i)] = list[i];
    }
  }
  return out;
}

void expect_same_tensors(const torch::jit::Module& mapped, const torch::jit::Module& loaded) {
  const auto a = mapped_test_tensors(mapped), b = mapped_test_tensors(loaded);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, tensor] : b) {
    const at::Tensor& other = a.at(name);
    EXPECT_EQ(other.scalar_type(), tensor.scalar_type()) << name;
    EXPECT_EQ(other.sizes(), tensor.sizes()) << name;
    EXPECT_EQ(other.strides(), tensor.strides()) << name;
    EXPECT_EQ(other.storage_offset(), tensor.storage_offset()) << name;
    EXPECT_EQ(other.requires_grad(), tensor.requires_grad()) << name;
    // Bit for bit: equal() would call two NaNs different and -0 equal to 0.
    const at::Tensor x = other.contiguous(), y = tensor.contiguous();
    ASSERT_EQ(x.nbytes(), y.nbytes()) << name;
    EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()), 0) << name;
  }
}

// A model with what the mapping must get right: several dtypes, a tied parameter, two
// parameters viewing one storage at different offsets, a non-contiguous parameter, large and
// small buffers, a tensor attribute and a list of tensors, and an odd-sized tensor.
std::string save_mapping_model() {
  const std::string path = mapped_test_path("mapping_model.pt");
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  torch::jit::Module root("__torch__.MappingModel");
  torch::jit::Module left("__torch__.Left"), right("__torch__.Right");
  const at::Tensor tied = torch::randn({64, 48});
  left.register_parameter("weight", tied, false);
  right.register_parameter("weight", tied, false);
  left.register_parameter("half", torch::randn({3001}).to(torch::kHalf), false);
  right.register_parameter("bf16", torch::randn({33, 65}).to(torch::kBFloat16), false);
  const at::Tensor storage = torch::randn({4000}, torch::kDouble);
  root.register_parameter("head", storage.narrow(0, 0, 1500), false);
  root.register_parameter("tail", storage.narrow(0, 1500, 2500).view({50, 50}), false);
  root.register_parameter("transposed", torch::randn({40, 70}).t(), false);
  root.register_parameter("small", torch::randn({3}), false);
  root.register_buffer("steps", torch::arange(2000, torch::kLong));
  root.register_buffer("mask", torch::rand({5000}) > 0.5);
  root.register_buffer("tiny", torch::ones({2}));
  root.register_attribute("table", c10::TensorType::get(), torch::randn({100, 30}));
  root.register_attribute("pages", c10::ListType::ofTensors(),
                          c10::List<at::Tensor>({torch::randn({2048}), torch::randn({5})}));
  root.register_module("left", left);
  root.register_module("right", right);
  root.define(R"(
    def forward(self, x: Tensor) -> Tensor:
        return x.matmul(self.left.weight).sum() + self.tail.sum()
  )");
  root.save(path);
  return path;
}

TEST(MappedArchive, EveryTensorEqualsTorchJitLoadBitForBit) {
  const std::string path = save_mapping_model();
  MappedArchiveStats stats;
  const torch::jit::Module mapped = load_mapped_archive(path, &stats);
  expect_same_tensors(mapped, torch::jit::load(path));
  // Parameters of 4 KiB and more are mapped: the tied weight once, the shared double storage
  // once, the half, bfloat16 and transposed ones; everything else is read.
  const int64_t expected_mapped = 64 * 48 * 4 + 3001 * 2 + 33 * 65 * 2 + 4000 * 8 + 40 * 70 * 4;
  EXPECT_EQ(stats.mapped_bytes, expected_mapped);
  EXPECT_EQ(stats.tensor_bytes,
            expected_mapped + 3 * 4 + 2000 * 8 + 5000 + 2 * 4 + 100 * 30 * 4 + 2048 * 4 + 5 * 4);
  EXPECT_EQ(stats.parameter_bytes, expected_mapped + 3 * 4);
}

TEST(MappedArchive, TiedAndViewingParametersStillShareTheirStorage) {
  const torch::jit::Module mapped = load_mapped_archive(save_mapping_model(), nullptr);
  const auto tensors = mapped_test_tensors(mapped);
  EXPECT_TRUE(tensors.at("param left.weight").is_same(tensors.at("param right.weight")));
  EXPECT_TRUE(tensors.at("param head").storage().is_alias_of(tensors.at("param tail").storage()));
  EXPECT_EQ(tensors.at("param tail").storage_offset(), 1500);
}

TEST(MappedArchive, ModelRunsAndBuffersCanBeWritten) {
  const std::string path = save_mapping_model();
  torch::jit::Module mapped = load_mapped_archive(path, nullptr);
  torch::jit::Module loaded = torch::jit::load(path);
  const at::Tensor x = torch::ones({3, 64});
  EXPECT_TRUE(torch::equal(mapped.forward({x}).toTensor(), loaded.forward({x}).toTensor()));
  // Buffers are copies of their own: writing one leaves the file and the parameters alone.
  at::Tensor steps = mapped.attr("steps").toTensor();
  steps.add_(1);
  at::Tensor head = mapped.attr("head").toTensor();
  {
    torch::NoGradGuard no_grad;
    head.mul_(2);  // a mapped parameter: the page is copied for this process only
  }
  EXPECT_TRUE(
      torch::equal(torch::jit::load(path).attr("head").toTensor(), loaded.attr("head").toTensor()));
  EXPECT_EQ(mapped.attr("steps").toTensor()[0].item<int64_t>(), 1);
}

TEST(MappedArchive, FixturesLoadAsTorchJitLoadsThem) {
  for (const char* name : {"tied_lm.pt", "untied_lm.pt", "mixed.pt", "conditional.pt",
                           "looped_lm.pt", "dropout_lm.pt"}) {
    SCOPED_TRACE(name);
    expect_same_tensors(load_mapped_archive(fixture(name), nullptr),
                        torch::jit::load(fixture(name)));
  }
}

// The point of mapping: a rank reads the slice it copies and no more, and gives the pages
// back once the tensor is gone.
TEST(MappedArchive, OnlyWhatIsReadBecomesResident) {
  const std::string path = mapped_test_path("large_model.pt");
  {
    torch::jit::Module model("__torch__.Large");
    model.register_parameter("weight", torch::arange(64 << 18, torch::kFloat), false);  // 64 MiB
    model.define("def forward(self, x: Tensor) -> Tensor:\n  return x + self.weight\n");
    model.save(path);
  }
  const int64_t before = host_memory::rss_bytes();
  torch::jit::Module mapped = load_mapped_archive(path, nullptr);
  at::Tensor weight = mapped.attr("weight").toTensor();
  EXPECT_LT(host_memory::rss_bytes() - before, 8 << 20);
  // A quarter of it, as rank 1 of 4 would copy into its shard.
  const at::Tensor slice = weight.narrow(0, 16 << 18, 16 << 18).clone();
  EXPECT_EQ(slice[0].item<float>(), static_cast<float>(16 << 18));
  EXPECT_LT(host_memory::rss_bytes() - before, 40 << 20);
  EXPECT_GT(host_memory::rss_bytes() - before, 30 << 20);  // the slice's pages and its copy
  const int64_t with_slice = host_memory::rss_bytes();
  weight = at::Tensor();
  mapped = torch::jit::Module();
  EXPECT_LT(host_memory::rss_bytes(), with_slice - (12 << 20));  // the mapped pages went back
}

TEST(ZipDirectory, ListsTheRecordsTorchReads) {
  const ZipDirectory directory = read_zip_directory(fixture("tied_lm.pt"));
  caffe2::serialize::PyTorchStreamReader reader(fixture("tied_lm.pt"));
  std::vector<std::string> names;
  for (const ZipRecord& record : directory.records) {
    names.push_back(record.name.substr(record.name.find('/') + 1));
    // Tensors are stored as they are (code may be deflated).
    if (names.back().rfind("data/", 0) == 0) EXPECT_EQ(record.method, 0) << record.name;
    EXPECT_EQ(std::get<1>(reader.getRecord(names.back())), record.size) << record.name;
  }
  std::vector<std::string> expected = reader.getAllRecords();
  std::sort(names.begin(), names.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names, expected);
  EXPECT_EQ(directory.file_size, std::filesystem::file_size(fixture("tied_lm.pt")));
  EXPECT_EQ(directory.digest.size(), 64u);
}

TEST(ZipDirectory, DigestChangesWithOneWeightAndNotWithACopy) {
  const std::string path = mapped_test_path("digest_a.pt"), copy = mapped_test_path("digest_b.pt");
  std::filesystem::copy_file(fixture("tied_lm.pt"), path,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(fixture("tied_lm.pt"), copy,
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(read_zip_directory(path).digest, read_zip_directory(copy).digest);
  torch::jit::Module module = torch::jit::load(copy);
  {
    torch::NoGradGuard no_grad;
    module.attr("wte").toModule().attr("weight").toTensor()[3][4].add_(1);
  }
  module.save(copy);
  EXPECT_NE(read_zip_directory(path).digest, read_zip_directory(copy).digest);
}

TEST(ZipDirectory, RefusesWhatIsNoZipArchiveWithOneLine) {
  EXPECT_MFSDP_ERROR(read_zip_directory(fixture("bad/truncated.pt")), ExitCode::kModel,
                     "truncated.pt: not a TorchScript archive, or truncated");
  const std::string text = mapped_test_path("not_zip.pt");
  std::ofstream(text) << std::string(100, 'x');
  EXPECT_MFSDP_ERROR(read_zip_directory(text), ExitCode::kModel, "no zip end-of-directory record");
  // A directory that claims more records than it has room for (LibTorch writes zip64 end
  // records, whose count is the one read), and one that starts beyond the file.
  std::ifstream in(fixture("tied_lm.pt"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t zip64 = bytes.rfind(std::string("PK\x06\x06", 4));
  ASSERT_NE(zip64, std::string::npos);
  auto edited = [&](size_t at, char value) {
    std::string copy = bytes;
    copy[at] = value;
    return parse_zip_directory(reinterpret_cast<const unsigned char*>(copy.data()), copy.size(),
                               "edited.pt");
  };
  EXPECT_MFSDP_ERROR(edited(zip64 + 32 + 3, '\x01'), ExitCode::kModel,
                     "edited.pt: not a TorchScript archive, or truncated (its central directory "
                     "is shorter than its");
  EXPECT_MFSDP_ERROR(edited(zip64 + 48 + 4, '\x01'), ExitCode::kModel,
                     "its central directory lies outside the file");
  EXPECT_NO_THROW(edited(zip64 + 60, 'x'));  // the locator's disk number is not read
}

}  // namespace
}  // namespace mfsdp::planner
