// Hugging Face weights as mfsdp reads them (safetensors/safetensors.h): the start of a
// .safetensors file through parse_header, and a model.safetensors.index.json through
// parse_index. Their only documented error is a usage error.
//
// Each input is tried three ways: as a whole .safetensors file; when it starts with '{', as the
// JSON header of a file whose data area ends where its largest data_offsets say (so that
// mutating the JSON need not keep the 8-byte length in step); and as an index's text.
//
// A header that parses must tile its data area: tensors in offset order, each beginning where
// the previous ends, the first at the data area's start, the last at the file's end, each
// holding exactly numel * item_size bytes, names unique and not empty. encode_header of what
// parsed must parse back to the same tensors and metadata. An index that parses maps only to
// plain file names in its directory.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "safetensors/safetensors.h"
#include "schema/error.h"
#include "schema/json_text.h"
#include "tests/fuzz/harness.h"

namespace mfsdp::fuzz {
namespace {

namespace st = safetensors;

const std::string kFile = "ckpt/model-00001-of-00002.safetensors";
const std::string kIndex = "ckpt/model.safetensors.index.json";

void check_tiling(const st::Header& header, uint64_t file_size) {
  if (header.data_begin < 8 || header.data_begin - 8 > st::kMaxHeaderBytes ||
      header.data_begin > file_size) {
    finding("a header that parses has its data area at " + std::to_string(header.data_begin));
  }
  uint64_t expected = header.data_begin;
  std::set<std::string> names;
  for (const st::TensorInfo& tensor : header.tensors) {
    if (tensor.name.empty() || !names.insert(tensor.name).second) {
      finding("a header that parses has an empty or repeated name " + st::quoted_name(tensor.name));
    }
    if (tensor.begin != expected || tensor.end < tensor.begin || tensor.end > file_size) {
      finding("tensor " + st::quoted_name(tensor.name) + " of a header that parses lies at [" +
              std::to_string(tensor.begin) + ", " + std::to_string(tensor.end) + ") where [" +
              std::to_string(expected) + ", ...) was due, in a file of " +
              std::to_string(file_size) + " bytes");
    }
    // numel() multiplies in int64: no step of it may overflow for what parses.
    int64_t numel = 1;
    for (int64_t dim : tensor.shape) {
      if (dim < 0 || __builtin_mul_overflow(numel, dim, &numel)) {
        finding("tensor " + st::quoted_name(tensor.name) +
                " of a header that parses has a negative dimension or more elements than int64 "
                "holds");
      }
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel), st::item_size(tensor.dtype), &bytes) ||
        numel != tensor.numel() || bytes != tensor.byte_size()) {
      finding("tensor " + st::quoted_name(tensor.name) + " of a header that parses holds " +
              std::to_string(tensor.byte_size()) +
              " bytes, not numel * item_size = " + std::to_string(bytes));
    }
    expected = tensor.end;
  }
  if (expected != file_size) finding("a header that parses leaves the file's tail to no tensor");
}

void check_reencoding(const st::Header& header, uint64_t file_size) {
  std::vector<st::TensorInfo> relative = header.tensors;
  for (st::TensorInfo& tensor : relative) {
    tensor.begin -= header.data_begin;
    tensor.end -= header.data_begin;
  }
  const std::string bytes = st::encode_header(relative, header.metadata);
  if (bytes.size() % 8 != 0) finding("encode_header wrote a header not padded to 8 bytes");
  st::Header again;
  try {
    again = st::parse_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                             bytes.size() + (file_size - header.data_begin), kFile);
  } catch (const Error& error) {
    finding(std::string("a header as encode_header writes it does not parse: ") + error.what());
  }
  if (again.metadata != header.metadata || again.tensors.size() != header.tensors.size()) {
    finding("a header read back from encode_header has other metadata or tensors");
  }
  for (size_t i = 0; i < again.tensors.size(); ++i) {
    const st::TensorInfo& a = again.tensors[i];
    const st::TensorInfo& b = header.tensors[i];
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape ||
        a.begin - again.data_begin != b.begin - header.data_begin ||
        a.end - again.data_begin != b.end - header.data_begin) {
      finding("tensor " + st::quoted_name(b.name) + " reads back from encode_header changed");
    }
  }
}

void check_header(const uint8_t* data, size_t size, uint64_t file_size) {
  const st::Header header = st::parse_header(data, size, file_size, kFile);
  check_tiling(header, file_size);
  check_reencoding(header, file_size);
}

// The data area a header's JSON implies: up to its largest data_offsets end, at most 2^62 bytes
// so that sizes derived from it cannot wrap.
uint64_t implied_data_size(const std::string& text) {
  nlohmann::ordered_json doc;
  if (!schema::parse_json_text(text, doc).empty() || !doc.is_object()) return 0;
  uint64_t size = 0;
  for (const auto& item : doc.items()) {
    const auto& entry = item.value();
    if (!entry.is_object() || !entry.contains("data_offsets")) continue;
    const auto& offsets = entry.at("data_offsets");
    if (offsets.is_array() && offsets.size() == 2 && offsets[1].is_number_unsigned()) {
      size = std::max(size, std::min(offsets[1].get<uint64_t>(), uint64_t{1} << 62));
    }
  }
  return size;
}

void check_index(const std::string& text) {
  const st::Index index = st::parse_index(text, kIndex);
  for (const auto& [tensor, file] : index.weight_map) {
    if (tensor.empty() || !st::is_plain_file_name(file)) {
      finding("an index that parses maps " + st::quoted_name(tensor) + " to " +
              st::quoted_name(file) + ", outside its directory");
    }
  }
}

}  // namespace
}  // namespace mfsdp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mfsdp;
  fuzz::expect_only_usage_errors([&] { fuzz::check_header(data, size, size); });
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (size > 0 && text[0] == '{') {
    std::string file(8, '\0');
    for (size_t i = 0; i < 8; ++i) file[i] = static_cast<char>((size >> (8 * i)) & 0xFF);
    file += text;
    const uint64_t data_size = fuzz::implied_data_size(text);
    fuzz::expect_only_usage_errors([&] {
      fuzz::check_header(reinterpret_cast<const uint8_t*>(file.data()), file.size(),
                         file.size() + data_size);
    });
  }
  fuzz::expect_only_usage_errors([&] { fuzz::check_index(text); });
  return 0;
}
