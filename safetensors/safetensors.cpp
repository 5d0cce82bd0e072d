// The format itself: dtypes, the header a file starts with, the index of a sharded checkpoint.
// No file access here, so the fuzz target links this alone.
//
// Over 400 lines: the dtypes, the header's reader and writer and the sharded index's, which
// check every field against the format's rules in one place for the fuzz target.
#include "safetensors/safetensors.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "schema/error.h"

namespace mfsdp::safetensors {
namespace {

using json = nlohmann::json;

struct DtypeInfo {
  Dtype dtype;
  const char* name;
  size_t size;
  const char* schema;  // null: mfsdp's plans have no such dtype
};

// Indexed by Dtype.
constexpr std::array<DtypeInfo, 15> kDtypes{{
    {Dtype::kBool, "BOOL", 1, "bool"},
    {Dtype::kU8, "U8", 1, "uint8"},
    {Dtype::kI8, "I8", 1, "int8"},
    {Dtype::kF8E5M2, "F8_E5M2", 1, nullptr},
    {Dtype::kF8E4M3, "F8_E4M3", 1, nullptr},
    {Dtype::kI16, "I16", 2, "int16"},
    {Dtype::kU16, "U16", 2, nullptr},
    {Dtype::kF16, "F16", 2, "float16"},
    {Dtype::kBF16, "BF16", 2, "bfloat16"},
    {Dtype::kI32, "I32", 4, "int32"},
    {Dtype::kU32, "U32", 4, nullptr},
    {Dtype::kF32, "F32", 4, "float32"},
    {Dtype::kF64, "F64", 8, "float64"},
    {Dtype::kI64, "I64", 8, "int64"},
    {Dtype::kU64, "U64", 8, nullptr},
}};

const DtypeInfo& info_of(Dtype dtype) {
  return kDtypes[static_cast<size_t>(dtype)];
}

// A header nests three levels (object, tensor, shape); an index's metadata may nest more.
constexpr size_t kHeaderDepth = 8;
constexpr size_t kIndexDepth = 64;

const char* const kDamaged =
    "; the file is damaged or not a safetensors file: re-export or download it again";

// Builds the document as nlohmann's parser does, but stops at a key its object already holds
// (nlohmann keeps the last silently, so a second tensor of one name would hide the first) and
// at containers nested deeper than `max_depth`.
class StrictParser {
 public:
  StrictParser(json& root, size_t max_depth) : dom_(root, false), max_depth_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool value) { return dom_.boolean(value); }
  bool number_integer(json::number_integer_t value) { return dom_.number_integer(value); }
  bool number_unsigned(json::number_unsigned_t value) { return dom_.number_unsigned(value); }
  bool number_float(json::number_float_t value, const std::string& text) {
    return dom_.number_float(value, text);
  }
  bool string(std::string& value) { return dom_.string(value); }
  bool binary(json::binary_t& value) { return dom_.binary(value); }
  bool start_object(size_t size) {
    if (!deeper()) return false;
    keys_.emplace_back();
    path_.emplace_back();
    return dom_.start_object(size);
  }
  bool key(std::string& value) {
    if (!keys_.back().insert(value).second) {
      duplicate = value;
      duplicate_path.assign(path_.begin(), path_.end() - 1);
      return false;
    }
    path_.back() = value;
    return dom_.key(value);
  }
  bool end_object() {
    keys_.pop_back();
    path_.pop_back();
    --depth_;
    return dom_.end_object();
  }
  bool start_array(size_t size) { return deeper() && dom_.start_array(size); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& error) {
    error_position = position;
    error_message = error.what();
    return false;
  }

  std::optional<std::string> duplicate;
  std::vector<std::string> duplicate_path;  // keys of the objects around the duplicate
  bool too_deep = false;
  size_t error_position = 0;
  std::string error_message;

 private:
  bool deeper() {
    too_deep = ++depth_ > max_depth_;
    return !too_deep;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  size_t max_depth_;
  size_t depth_ = 0;
  std::vector<std::set<std::string>> keys_;
  std::vector<std::string> path_;
};

// `text` cut to at most about `max` bytes, at a UTF-8 character boundary.
std::string cut(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "...";
}

// A JSON value for a message, on one line.
std::string shown(const json& value) {
  return cut(value.dump(-1, ' ', false, json::error_handler_t::replace), 80);
}

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 4: syntax error
// while parsing value - invalid literal; last read: 'tru'" without prefix, position and echo.
std::string json_phrase(std::string message) {
  const size_t prefix = message.find(": ");
  if (message.rfind("[json.exception.", 0) == 0 && prefix != std::string::npos) {
    message.erase(0, prefix + 2);
  }
  const size_t echo = message.find("; last read");
  if (echo != std::string::npos) message.erase(echo);
  std::replace(message.begin(), message.end(), '\n', ' ');
  return cut(message, 160);
}

// Parses `size` bytes of `text` into the document `parser` builds. Returns "" or what is wrong
// as a phrase ("is not valid JSON (...)"); a duplicate key is left in `parser` for the caller
// to name in its own terms.
std::string parse_strict(const char* text, size_t size, size_t max_depth, StrictParser& parser) {
  // nlohmann's lexer takes a NUL for the end of the input and would accept what precedes it.
  if (const void* nul = std::memchr(text, '\0', size)) {
    return "holds a NUL byte at byte " + std::to_string(static_cast<const char*>(nul) - text);
  }
  if (json::sax_parse(text, text + size, &parser)) return "";
  if (parser.duplicate) return "duplicate";
  if (parser.too_deep) {
    return "nests arrays or objects deeper than " + std::to_string(max_depth) + " levels";
  }
  return "is not valid JSON (" + json_phrase(parser.error_message) + " at byte " +
         std::to_string(parser.error_position == 0 ? 0 : parser.error_position - 1) + ")";
}

// A JSON integer in [0, max], or none.
std::optional<uint64_t> whole_number(const json& value, uint64_t max) {
  if (value.is_number_unsigned()) {
    const uint64_t n = value.get<uint64_t>();
    if (n <= max) return n;
  } else if (value.is_number_integer() && value.get<int64_t>() == 0) {
    return 0;  // "-0"
  }
  return std::nullopt;
}

constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

std::string known_dtypes() {
  std::string out;
  for (const DtypeInfo& info : kDtypes) out += std::string(out.empty() ? "" : ", ") + info.name;
  return out;
}

std::string offsets_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// One tensor's entry, checked on its own. Offsets in the result are absolute.
TensorInfo tensor_entry(const std::string& name, const json& entry, uint64_t data_begin,
                        uint64_t data_size, const std::string& what) {
  const std::string where = what + ": tensor " + quoted_name(name);
  const auto bad = [&](const std::string& problem) {
    fail(ExitCode::kUsage, where + " " + problem + kDamaged);
  };
  if (name.empty()) {
    fail(ExitCode::kUsage, what + ": a tensor has an empty name" + kDamaged);
  }
  if (!entry.is_object()) {
    bad("is " + shown(entry) + ", not an object of dtype, shape and data_offsets");
  }
  for (const auto& field : entry.items()) {
    if (field.key() != "dtype" && field.key() != "shape" && field.key() != "data_offsets") {
      bad("has a field " + quoted_name(field.key()) +
          " besides dtype, shape and data_offsets; mfsdp reads no others");
    }
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) bad(std::string("has no ") + field);
  }

  TensorInfo info;
  info.name = name;
  const json& dtype = entry.at("dtype");
  const std::optional<Dtype> known =
      dtype.is_string() ? dtype_from_string(dtype.get<std::string>()) : std::nullopt;
  if (!known) {
    bad("has dtype " + shown(dtype) + ", which mfsdp does not read (it reads " + known_dtypes() +
        ")");
  }
  info.dtype = *known;

  const json& shape = entry.at("shape");
  if (!shape.is_array()) bad("has shape " + shown(shape) + ", not an array");
  for (const json& dim : shape) {
    const std::optional<uint64_t> n = whole_number(dim, kInt64Max);
    if (!n) {
      bad("has shape " + shown(shape) + " with " + shown(dim) +
          ", which is not a dimension (an integer from 0 to 2^63 - 1)");
    }
    info.shape.push_back(static_cast<int64_t>(*n));
  }
  const std::optional<int64_t> bytes = byte_size(info.dtype, info.shape);
  if (!bytes) {
    bad("has shape " + shape_text(info.shape) + ", whose element or byte count overflows int64");
  }

  const json& offsets = entry.at("data_offsets");
  std::optional<uint64_t> begin;
  std::optional<uint64_t> end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = whole_number(offsets[0], std::numeric_limits<uint64_t>::max());
    end = whole_number(offsets[1], std::numeric_limits<uint64_t>::max());
  }
  if (!begin || !end) {
    bad("has data_offsets " + shown(offsets) + ", not two non-negative integers [begin, end]");
  }
  if (*begin > *end) {
    bad("has data_offsets " + offsets_text(*begin, *end) + " ending before they begin");
  }
  if (*end > data_size) {
    bad("has data_offsets " + offsets_text(*begin, *end) + " past the end of the data area (" +
        std::to_string(data_size) + " bytes; is the file truncated?)");
  }
  if (*end - *begin != static_cast<uint64_t>(*bytes)) {
    bad("is " + std::string(dtype_name(info.dtype)) + " " + shape_text(info.shape) + ", " +
        std::to_string(*bytes) + " bytes, but its data_offsets " + offsets_text(*begin, *end) +
        " hold " + std::to_string(*end - *begin));
  }
  info.begin = data_begin + *begin;
  info.end = data_begin + *end;
  return info;
}

std::map<std::string, std::string> metadata_entry(const json& value, const std::string& what) {
  std::map<std::string, std::string> metadata;
  if (value.is_null()) return metadata;
  if (!value.is_object()) {
    fail(ExitCode::kUsage,
         what + ": __metadata__ is " + shown(value) + ", not an object of strings" + kDamaged);
  }
  for (const auto& item : value.items()) {
    if (!item.value().is_string()) {
      fail(ExitCode::kUsage, what + ": __metadata__ " + quoted_name(item.key()) + " is " +
                                 shown(item.value()) + ", not a string" + kDamaged);
    }
    metadata[item.key()] = item.value().get<std::string>();
  }
  return metadata;
}

// Sorted by offsets, the tensors must tile the data area: each begins where the previous ends,
// the first at 0, the last at the end of the file.
void check_tiling(const Header& header, uint64_t file_size, const std::string& what) {
  uint64_t expected = header.data_begin;
  const TensorInfo* previous = nullptr;
  const auto relative = [&](const TensorInfo& t) {
    return offsets_text(t.begin - header.data_begin, t.end - header.data_begin);
  };
  for (const TensorInfo& tensor : header.tensors) {
    if (tensor.begin < expected) {
      fail(ExitCode::kUsage, what + ": tensor " + quoted_name(tensor.name) + " (data_offsets " +
                                 relative(tensor) + ") overlaps tensor " +
                                 quoted_name(previous->name) + " (" + relative(*previous) + ")" +
                                 kDamaged);
    }
    if (tensor.begin > expected) {
      fail(ExitCode::kUsage,
           what + ": " + std::to_string(tensor.begin - expected) + " bytes before tensor " +
               quoted_name(tensor.name) + " (data_offsets " + relative(tensor) + ") belong to no " +
               (previous ? "tensor (the previous, " + quoted_name(previous->name) + ", ends at " +
                               std::to_string(previous->end - header.data_begin) + ")"
                         : std::string("tensor (the data area starts at 0)")) +
               kDamaged);
    }
    expected = tensor.end;
    previous = &tensor;
  }
  if (expected != file_size) {
    fail(ExitCode::kUsage,
         what + ": the last " + std::to_string(file_size - expected) +
             " bytes of the file belong to no tensor (" +
             (previous ? "the last, " + quoted_name(previous->name) + ", ends at data offset " +
                             std::to_string(previous->end - header.data_begin)
                       : std::string("the header lists none")) +
             ")" + kDamaged);
  }
}

}  // namespace

std::optional<Dtype> dtype_from_string(const std::string& name) {
  for (const DtypeInfo& info : kDtypes) {
    if (name == info.name) return info.dtype;
  }
  return std::nullopt;
}

const char* dtype_name(Dtype dtype) {
  return info_of(dtype).name;
}

size_t item_size(Dtype dtype) {
  return info_of(dtype).size;
}

std::optional<Dtype> dtype_from_schema(const std::string& name) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.schema && name == info.schema) return info.dtype;
  }
  return std::nullopt;
}

std::optional<std::string> schema_dtype(Dtype dtype) {
  const char* name = info_of(dtype).schema;
  return name ? std::optional<std::string>(name) : std::nullopt;
}

std::string quoted_name(const std::string& name) {
  const std::string out = json(name).dump(-1, ' ', false, json::error_handler_t::replace);
  return out.size() > 120 ? cut(out, 100) + "\"" : out;
}

std::optional<int64_t> byte_size(Dtype dtype, const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(numel, dim, &numel)) return std::nullopt;
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(item_size(dtype)), &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;  // parse_header and declare() refuse any overflow
  return n;
}

Header parse_header(const uint8_t* data, size_t size, uint64_t file_size, const std::string& what) {
  if (file_size < 8) {
    fail(ExitCode::kUsage, what + " is " + std::to_string(file_size) +
                               " bytes, too short for the 8-byte header length a safetensors "
                               "file starts with" +
                               kDamaged);
  }
  if (size < 8 || size > file_size) {
    fail(ExitCode::kInternal, "parse_header of " + what + " got " + std::to_string(size) +
                                  " of its " + std::to_string(file_size) + " bytes");
  }
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | data[i];
  if (length > kMaxHeaderBytes) {
    fail(ExitCode::kUsage, what + " states a header of " + std::to_string(length) +
                               " bytes, beyond the " + std::to_string(kMaxHeaderBytes) +
                               " that safetensors allows" + kDamaged);
  }
  if (length > file_size - 8) {
    fail(ExitCode::kUsage, what + " states a header of " + std::to_string(length) +
                               " bytes but has only " + std::to_string(file_size - 8) +
                               " after the length (truncated?)" + kDamaged);
  }
  if (size - 8 < length) {
    fail(ExitCode::kInternal, "parse_header of " + what + " got " + std::to_string(size) +
                                  " bytes, not the whole header of " + std::to_string(length));
  }
  const char* text = reinterpret_cast<const char*>(data + 8);
  if (length == 0 || text[0] != '{') {
    fail(ExitCode::kUsage,
         what + ": the header does not start with '{' (a JSON object)" + kDamaged);
  }

  json doc;
  StrictParser parser(doc, kHeaderDepth);
  const std::string problem = parse_strict(text, length, kHeaderDepth, parser);
  if (parser.duplicate) {
    const std::string& key = *parser.duplicate;
    const std::vector<std::string>& path = parser.duplicate_path;
    fail(ExitCode::kUsage,
         what + ": " +
             (path.empty()       ? "tensor " + quoted_name(key) + " appears twice in the header"
              : path.size() == 1 ? (path[0] == "__metadata__" ? "__metadata__"
                                                              : "tensor " + quoted_name(path[0])) +
                                       " lists " + quoted_name(key) + " twice"
                                 : "key " + quoted_name(key) + " appears twice in one object") +
             kDamaged);
  }
  if (!problem.empty()) fail(ExitCode::kUsage, what + ": the header " + problem + kDamaged);

  Header header;
  header.data_begin = 8 + length;
  const uint64_t data_size = file_size - header.data_begin;
  for (const auto& item : doc.items()) {
    if (item.key() == "__metadata__") {
      header.metadata = metadata_entry(item.value(), what);
    } else {
      header.tensors.push_back(
          tensor_entry(item.key(), item.value(), header.data_begin, data_size, what));
    }
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              if (a.begin != b.begin) return a.begin < b.begin;
              if (a.end != b.end) return a.end < b.end;
              return a.name < b.name;
            });
  check_tiling(header, file_size, what);
  return header;
}

std::string encode_header(const std::vector<TensorInfo>& tensors,
                          const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  if (!metadata.empty()) doc["__metadata__"] = metadata;
  for (const TensorInfo& tensor : tensors) {
    nlohmann::ordered_json& entry = doc[tensor.name];
    entry["dtype"] = dtype_name(tensor.dtype);
    entry["shape"] = tensor.shape;
    entry["data_offsets"] = {tensor.begin, tensor.end};
  }
  std::string text;
  try {
    text = doc.dump();
  } catch (const nlohmann::ordered_json::exception& error) {
    fail(ExitCode::kUsage, std::string("a tensor name or metadata string is not UTF-8 (") +
                               error.what() + "); rename it");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  return out + text;
}

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

Index parse_index(const std::string& text, const std::string& what) {
  const char* const fix = "; re-export the checkpoint or download its index again";
  if (text.size() > kMaxHeaderBytes) {
    fail(ExitCode::kUsage, what + " is " + std::to_string(text.size()) + " bytes, beyond the " +
                               std::to_string(kMaxHeaderBytes) + " an index may have" + fix);
  }
  json doc;
  StrictParser parser(doc, kIndexDepth);
  const std::string problem = parse_strict(text.data(), text.size(), kIndexDepth, parser);
  if (parser.duplicate) {
    fail(ExitCode::kUsage,
         what + ": key " + quoted_name(*parser.duplicate) + " appears twice" +
             (parser.duplicate_path.empty() ? std::string()
                                            : " in " + quoted_name(parser.duplicate_path.back())) +
             fix);
  }
  if (!problem.empty()) fail(ExitCode::kUsage, what + " " + problem + fix);
  if (!doc.is_object() || !doc.contains("weight_map") || !doc.at("weight_map").is_object()) {
    fail(ExitCode::kUsage, what + " is not an object with a \"weight_map\" object" + fix);
  }
  Index index;
  if (doc.contains("metadata")) {
    const json& metadata = doc.at("metadata");
    if (!metadata.is_object() && !metadata.is_null()) {
      fail(ExitCode::kUsage, what + ": metadata is " + shown(metadata) + ", not an object" + fix);
    }
    if (metadata.is_object() && metadata.contains("total_size")) {
      index.total_size =
          whole_number(metadata.at("total_size"), std::numeric_limits<uint64_t>::max());
    }
  }
  for (const auto& item : doc.at("weight_map").items()) {
    const std::string where = what + " maps tensor " + quoted_name(item.key());
    if (item.key().empty()) fail(ExitCode::kUsage, what + " maps a tensor with no name" + fix);
    if (!item.value().is_string()) {
      fail(ExitCode::kUsage, where + " to " + shown(item.value()) + ", not a file name" + fix);
    }
    const std::string file = item.value().get<std::string>();
    if (!is_plain_file_name(file)) {
      fail(ExitCode::kUsage, where + " to " + quoted_name(file) +
                                 ", which is not a file name in the index's directory" + fix);
    }
    index.weight_map[item.key()] = file;
  }
  if (index.weight_map.empty()) fail(ExitCode::kUsage, what + " maps no tensors" + fix);
  return index;
}

}  // namespace mfsdp::safetensors
