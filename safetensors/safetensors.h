#pragma once
// safetensors files (Hugging Face's tensor format) and sharded checkpoint directories, read and
// written without LibTorch. A file is an 8-byte little-endian header length N, N bytes of JSON
// naming each tensor's dtype, shape and byte range, then the tensors' bytes (row-major,
// little-endian). Every size and offset a file states is checked before any byte is read
// through it; each problem is an Error(kUsage) naming the file, the tensor and the fix.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace mfsdp::safetensors {

// In the order of the reference implementation's Dtype, which is by alignment: its writer puts
// the largest first. Sub-byte (F4, F6_*), complex (C64) and scale (F8_E8M0) types are refused.
enum class Dtype {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64
};

std::optional<Dtype> dtype_from_string(const std::string& name);  // "BF16"; none if unknown
const char* dtype_name(Dtype dtype);                              // the file's spelling: "BF16"
size_t item_size(Dtype dtype);                                    // bytes per element
// numel * item_size, or none when a dimension is negative or the element count, multiplied in
// shape order, or the byte count overflows int64 (so numel() cannot overflow on what parses).
std::optional<int64_t> byte_size(Dtype dtype, const std::vector<int64_t>& shape);
// mfsdp's plan names ("float32", "bfloat16", ..., "bool"; schema/plan.h). F8_*, U16, U32 and
// U64 have none.
std::optional<Dtype> dtype_from_schema(const std::string& name);
std::optional<std::string> schema_dtype(Dtype dtype);

// A tensor or file name for a one-line message: JSON-quoted (control characters escaped) and
// cut short beyond 100 bytes.
std::string quoted_name(const std::string& name);

// The reference implementation's limit on N.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr char kIndexFileName[] = "model.safetensors.index.json";
constexpr char kSingleFileName[] = "model.safetensors";

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;  // empty for a 0-d scalar
  uint64_t begin = 0;          // absolute file offsets of the data: [begin, end)
  uint64_t end = 0;

  uint64_t byte_size() const { return end - begin; }
  int64_t numel() const;
};

struct Header {
  uint64_t data_begin = 8;                      // 8 + N: where the data area starts
  std::vector<TensorInfo> tensors;              // file order: by begin, then end, then name
  std::map<std::string, std::string> metadata;  // "__metadata__"; empty when absent or null
};

// Parses the start of a safetensors file of `file_size` bytes. `data` holds its first `size`
// bytes, at least the 8-byte length and the header when the file has them (the data area need
// not be there). The rules are the reference implementation's (header length at most 100 MB,
// tensors cover the data area from its start to the file's end, contiguous, each with exactly
// numel * item_size bytes), plus: the header starts with '{' and holds no NUL byte; no key
// appears twice; a tensor has exactly dtype, shape and data_offsets, a non-empty name, and
// sizes byte_size() accepts. Throws Error(kUsage), one line beginning with `what` (the path),
// on any violation; Error(kInternal) if `size` is too short for a header the file has.
Header parse_header(const uint8_t* data, size_t size, uint64_t file_size, const std::string& what);

// The bytes a file with these tensors starts with, as the reference writer makes them: the
// length, then compact JSON ("__metadata__" first when not empty, then `tensors` in the order
// given, fields dtype, shape, data_offsets) padded with spaces to a multiple of 8 bytes. Here
// each tensor's begin and end are relative to the data area (the JSON's data_offsets), not
// absolute. Throws Error(kUsage) for a name or metadata string that is not UTF-8.
std::string encode_header(const std::vector<TensorInfo>& tensors,
                          const std::map<std::string, std::string>& metadata);

// model.safetensors.index.json: {"metadata": {"total_size": N, ...}, "weight_map": {tensor:
// file, ...}}. Keys other than weight_map are not checked, except that metadata, if present,
// is an object or null; total_size is kept when it is a non-negative integer (it is
// informational: transformers does not check it either).
struct Index {
  std::optional<uint64_t> total_size;
  std::map<std::string, std::string> weight_map;  // tensor name -> file name in the directory
};
// Throws Error(kUsage) naming `what` when the text is not such an object, a key appears twice,
// the map is empty, or a file name is not a plain name in the directory (empty, ".", "..", a
// '/' or a NUL).
Index parse_index(const std::string& text, const std::string& what);
bool is_plain_file_name(const std::string& name);

// One safetensors file, memory-mapped read-only (MAP_PRIVATE) and its header checked. Tensor
// data is paged in only when read; release() gives the pages of a range back, so a reader that
// copies each tensor out once does not keep the whole file resident. Like any mmap reader, a
// file truncated by someone else while open makes a read fault (SIGBUS).
class File {
 public:
  // Throws Error(kIo) naming the path when it cannot be opened or mapped (missing, a directory,
  // unreadable), Error(kUsage) when its content is not a valid safetensors file.
  explicit File(const std::string& path);
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return mapping_.size; }
  const Header& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  const TensorInfo* find(const std::string& name) const;  // null when the file has none
  // The first byte of `tensor`, which must be one of this file's; byte_size() bytes follow.
  const uint8_t* data(const TensorInfo& tensor) const { return mapping_.data + tensor.begin; }
  // madvise(MADV_DONTNEED) on the whole pages inside [begin, end): they are dropped from this
  // process and read from the page cache again if touched.
  void release(uint64_t begin, uint64_t end) const;
  void release(const TensorInfo& tensor) const { release(tensor.begin, tensor.end); }

 private:
  struct Mapping {
    const uint8_t* data = nullptr;
    size_t size = 0;
    ~Mapping();
  };

  std::string path_;
  Mapping mapping_;
  Header header_;
  std::unordered_map<std::string, size_t> by_name_;
};

// A model's weights: one .safetensors file, or a directory holding model.safetensors.index.json
// and the files it names, or a directory holding exactly one .safetensors file. Every file is
// opened and checked against the index at construction, before any tensor is read: each tensor
// the index maps is in the file it names, and each tensor of a file is mapped to that file.
// Symbolic links are followed (a Hugging Face cache's snapshot holds links to its blobs).
class Checkpoint {
 public:
  struct Entry {
    const File* file;
    const TensorInfo* info;
  };

  // Throws Error(kIo) when `path` or a file cannot be opened, Error(kUsage) for a directory with
  // no weights, several .safetensors files and no index, a bad index, a file the index names
  // that is missing, any mismatch between index and files, or a bad file.
  explicit Checkpoint(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<std::unique_ptr<File>>& files() const { return files_; }  // by file name
  const std::map<std::string, Entry>& tensors() const { return tensors_; }    // by tensor name
  const Entry* find(const std::string& name) const;                           // null when absent
  // As find; throws Error(kUsage) naming the checkpoint and the tensor when absent.
  const Entry& at(const std::string& name) const;

 private:
  void open_index(const std::string& directory, const std::string& index_path);
  void add_file(const std::string& path);

  std::string path_;
  std::vector<std::unique_ptr<File>> files_;
  std::map<std::string, Entry> tensors_;
};

// Writes a checkpoint directory as transformers' save_pretrained does: files of at most
// `max_file_bytes` bytes of tensor data each (headers not counted, as in huggingface_hub),
// model-00001-of-0000N.safetensors, and model.safetensors.index.json (total_size and
// weight_map, json.dumps(indent=2, sort_keys=True) style), or a single model.safetensors and
// no index when everything fits in one file. Tensors go to files greedily in declared order; a
// tensor larger than the cap gets a file of its own (huggingface_hub keeps filling the file
// open before it; here files follow declared order, so the bytes can be streamed). Inside a
// file the data is laid out as the reference writer lays it out (largest alignment first, then
// by name), so every tensor is aligned and the bytes equal what safetensors.save_file writes;
// metadata is {"format": "pt"}.
//
// Lifecycle: declare() every tensor, then write() each one's bytes (little-endian, row-major)
// in declared order, in one or more chunks (a tensor of 0 bytes needs none), then finish().
// Each file is written under a hidden temporary name in the directory and renamed into place
// by finish(); a writer destroyed before finish() removes its temporary files. finish() also
// removes what an earlier export left in the directory under these names (model.safetensors,
// the index, model-*-of-*.safetensors) that is not part of this one.
class ShardedWriter {
 public:
  // Makes `directory` if missing (its parent must exist): Error(kIo) when that fails.
  // Error(kUsage) for a cap of 0.
  ShardedWriter(const std::string& directory, uint64_t max_file_bytes);
  ~ShardedWriter();
  ShardedWriter(const ShardedWriter&) = delete;
  ShardedWriter& operator=(const ShardedWriter&) = delete;

  // Error(kUsage) naming the tensor for an empty, non-UTF-8 or repeated name, a negative
  // dimension, or a byte size (its own, or all tensors' together) beyond int64.
  void declare(const std::string& name, Dtype dtype, const std::vector<int64_t>& shape);
  // Error(kInternal) for a write out of declared order, to an undeclared or finished tensor, or
  // past its declared size; Error(kIo) naming the file and strerror when the write fails, after
  // which the writer takes no more writes (destroying it removes what it wrote).
  void write(const std::string& name, const void* data, size_t size);
  // Error(kInternal) when a tensor has fewer bytes than declared; Error(kIo) on a failure.
  void finish();

  // The files in order, once the first write() or finish() has assigned tensors to them.
  std::vector<std::string> file_names() const;

 private:
  enum class Phase { kDeclaring, kWriting, kFinished, kFailed };

  struct Tensor {
    TensorInfo info;  // begin and end: absolute offsets in its file, once laid out
    size_t file = 0;
    uint64_t written = 0;
  };
  struct Shard {
    std::string name;
    std::string temp;  // path of the temporary file, once created
    std::string header;
    size_t last = 0;  // index of its last tensor in declared order
    bool renamed = false;
  };

  void lay_out();
  void advance();
  void open_shard(size_t shard);
  void close_shard(size_t shard);
  void remove_stale_files();
  std::string path_of(const std::string& name) const;
  [[noreturn]] void fail_io(const std::string& path, int error);

  std::string directory_;
  uint64_t max_file_bytes_;
  Phase phase_ = Phase::kDeclaring;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, size_t> by_name_;
  std::vector<Shard> shards_;
  int64_t total_bytes_ = 0;
  size_t next_ = 0;  // the first tensor in declared order not yet complete
  int fd_ = -1;      // the temporary file of the shard being written
};

}  // namespace mfsdp::safetensors
