#include "executor/train/data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include "executor/train/tensor_text.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform draw in [0, count) from 64 random bits, without the bias of `bits % count`.
int64_t uniform_below(uint64_t bits, int64_t count) {
  return static_cast<int64_t>(
      (static_cast<unsigned __int128>(bits) * static_cast<uint64_t>(count)) >> 64);
}

at::Tensor id_range(int64_t first, int64_t count) {
  return at::arange(first, first + count, at::TensorOptions().dtype(at::kLong));
}

// The part every kind shares: which global ids a (step, microbatch) of this rank holds.
class SplitSource : public DataSource {
 public:
  SplitSource(BatchSplit split, int rank) : split_(split), rank_(rank) {}

  Batch batch(int64_t step, int64_t microbatch) final {
    if (step < 0 || microbatch < 0 || microbatch >= split_.microbatches) {
      fail(ExitCode::kInternal, "data batch asked for step " + std::to_string(step) +
                                    ", microbatch " + std::to_string(microbatch) + " of " +
                                    std::to_string(split_.microbatches));
    }
    const int64_t first = split_.first_sample(step, rank_, microbatch);
    Batch out = samples(first, split_.per_microbatch());
    out.sample_ids = id_range(first, split_.per_microbatch());
    return out;
  }

 protected:
  // The samples with global ids first .. first+count-1, stacked along dim 0.
  virtual Batch samples(int64_t first, int64_t count) = 0;

 private:
  BatchSplit split_;
  int rank_;
};

class SyntheticSource : public SplitSource {
 public:
  SyntheticSource(const DataConfig& config, BatchSplit split, int rank)
      : SplitSource(split, rank), config_(config) {}

  std::string describe() const override {
    std::string text = "synthetic " + config_.input_dtype + " " + shape_text(config_.sample_shape);
    if (tokens())
      text += ", ids below " + std::to_string(config_.vocab_size) + ", next-token targets";
    return text + ", seed " + std::to_string(config_.seed);
  }

 protected:
  Batch samples(int64_t first, int64_t count) override {
    std::vector<at::Tensor> inputs, targets;
    for (int64_t id = first; id < first + count; ++id) {
      at::Generator gen =
          at::detail::createCPUGenerator(sample_seed(config_.seed, kInputStream, id));
      if (tokens()) {
        // One more token along the last dim, so the target is the input shifted by one.
        std::vector<int64_t> shape = config_.sample_shape;
        const int64_t length = shape.back()++;
        at::Tensor ids = at::randint(config_.vocab_size, shape, gen, at::kLong);
        inputs.push_back(ids.narrow(-1, 0, length));
        targets.push_back(ids.narrow(-1, 1, length));
      } else {
        inputs.push_back(at::randn(config_.sample_shape, gen, at::kFloat));
      }
    }
    Batch out;
    out.input = at::stack(inputs);
    if (tokens()) out.target = at::stack(targets);
    return out;
  }

 private:
  bool tokens() const { return config_.input_dtype == "int64"; }
  DataConfig config_;
};

// A read-only memory map of a whole file, or nothing for an empty one.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_io(path, errno);
    struct stat info {};
    int error = 0;
    if (::fstat(fd, &info) != 0) {
      error = errno;
    } else if (S_ISDIR(info.st_mode)) {
      error = EISDIR;
    } else if (!S_ISREG(info.st_mode)) {
      error = EINVAL;  // mmap needs a regular file; a pipe has no size to map.
    }
    if (error != 0) {
      ::close(fd);
      fail_io(path, error);
    }
    size_ = static_cast<size_t>(info.st_size);
    if (size_ > 0) {
      void* data = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (data == MAP_FAILED) {
        const int error = errno;
        ::close(fd);
        fail_io(path, error);
      }
      data_ = static_cast<const unsigned char*>(data);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

  [[noreturn]] static void fail_io(const std::string& path, int error) {
    fail(ExitCode::kIo,
         "cannot read data file " + path + ": " + std::strerror(error) + "; check the --data path");
  }

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// Text (one byte per token) and nanoGPT token files (little-endian uint16 per token): each
// sample is a window of seq_len + 1 tokens at a position drawn from (seed, sample id).
class WindowSource : public SplitSource {
 public:
  WindowSource(const DataConfig& config, BatchSplit split, int rank)
      : SplitSource(split, rank),
        config_(config),
        file_(config.path),
        width_(config.kind == "text" ? 1 : 2) {
    if (width_ == 2 && file_.size() % 2 != 0) {
      fail(ExitCode::kUsage, config.path + " has " + std::to_string(file_.size()) +
                                 " bytes, an odd number, but a tokens file holds 2-byte "
                                 "little-endian uint16 ids; check the file or pass --data-kind");
    }
    count_ = static_cast<int64_t>(file_.size()) / width_;
    const int64_t window = config.seq_len + 1;
    if (count_ < window) {
      const std::string unit = width_ == 1 ? " bytes" : " tokens";
      fail(ExitCode::kUsage, config.path + " has " + std::to_string(count_) + unit +
                                 " but --seq-len " + std::to_string(config.seq_len) +
                                 " needs at least " + std::to_string(window) + unit +
                                 " (one window of seq_len + 1); use a longer file or a "
                                 "smaller --seq-len");
    }
    check_ids();
  }

  std::string describe() const override {
    return config_.kind + " " + config_.path + " (" + std::to_string(count_) +
           (width_ == 1 ? " bytes" : " tokens") + ", largest id " + std::to_string(max_id_) +
           "), windows of " + std::to_string(config_.seq_len + 1) + ", seed " +
           std::to_string(config_.seed);
  }

 protected:
  Batch samples(int64_t first, int64_t count) override {
    const int64_t window = config_.seq_len + 1;
    at::Tensor rows = at::empty({count, window}, at::kLong);
    int64_t* out = rows.data_ptr<int64_t>();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t start =
          uniform_below(sample_seed(config_.seed, kInputStream, first + i), count_ - window + 1);
      for (int64_t j = 0; j < window; ++j) out[i * window + j] = token(start + j);
    }
    Batch batch;
    batch.input = rows.narrow(1, 0, config_.seq_len).contiguous();
    batch.target = rows.narrow(1, 1, config_.seq_len).contiguous();
    return batch;
  }

 private:
  int64_t token(int64_t position) const {
    const unsigned char* at = file_.data() + position * width_;
    return width_ == 1 ? at[0] : (at[0] | (at[1] << 8));
  }

  // Once at open, so a wrong --vocab-size fails before training rather than inside an
  // embedding lookup at some later step.
  void check_ids() {
    for (int64_t i = 0; i < count_; ++i) {
      const int64_t id = token(i);
      if (id >= config_.vocab_size) {
        fail(ExitCode::kUsage, std::string(width_ == 1 ? "byte " : "token id ") +
                                   std::to_string(id) + " at position " + std::to_string(i) +
                                   " of " + config_.path + " is >= the vocabulary size " +
                                   std::to_string(config_.vocab_size) +
                                   "; pass --vocab-size or check the file");
      }
      max_id_ = std::max(max_id_, id);
    }
  }

  DataConfig config_;
  MappedFile file_;
  int64_t width_;
  int64_t count_ = 0;
  int64_t max_id_ = 0;
};

// Rows of a torch.save file. Sample id i is row perm_e[i mod N] with e = i / N, where perm_e
// is a permutation drawn from (seed, e): every epoch sees every row once.
class TensorSource : public SplitSource {
 public:
  TensorSource(const DataConfig& config, BatchSplit split, int rank)
      : SplitSource(split, rank), config_(config) {
    load();
  }

  std::string describe() const override {
    std::string text = "tensors " + config_.path + " (" + std::to_string(rows_) +
                       " rows), inputs " + tensor_text(inputs_);
    text += targets_.defined() ? ", targets " + tensor_text(targets_) : ", no targets";
    return text + ", seed " + std::to_string(config_.seed);
  }

 protected:
  Batch samples(int64_t first, int64_t count) override {
    at::Tensor index = at::empty({count}, at::kLong);
    int64_t* out = index.data_ptr<int64_t>();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t id = first + i;
      out[i] = permutation(id / rows_)[static_cast<size_t>(id % rows_)];
    }
    Batch batch;
    batch.input = inputs_.index_select(0, index);
    if (targets_.defined()) batch.target = targets_.index_select(0, index);
    return batch;
  }

 private:
  [[noreturn]] void fail_file(const std::string& what) const {
    fail(ExitCode::kUsage, config_.path + ": " + what);
  }

  void load() {
    std::vector<char> bytes;
    {
      const MappedFile file(config_.path);
      bytes.assign(file.data(), file.data() + file.size());
    }
    c10::IValue value;
    try {
      value = torch::pickle_load(bytes);
    } catch (const c10::Error& e) {
      std::string reason = e.what_without_backtrace();
      reason = reason.substr(0, reason.find('\n'));
      // Python pickles a one-entry dict with SETITEM, an opcode LibTorch's unpickler lacks.
      if (reason.find("unpickling at 0x73:") != std::string::npos) {
        fail_file(
            "holds a dict with one key, which LibTorch cannot read; save (inputs,) or the "
            "bare inputs tensor instead");
      }
      fail_file("not a file written by torch.save (" + reason +
                "); save (inputs, targets) or {\"inputs\": ..., \"targets\": ...}");
    }
    c10::IValue inputs, targets;
    if (value.isTensor()) {
      inputs = value;
    } else if (value.isTuple() || value.isList()) {
      const std::vector<c10::IValue> items =
          value.isTuple() ? value.toTupleRef().elements().vec() : value.toListRef().vec();
      if (items.empty() || items.size() > 2) {
        fail_file("holds a sequence of " + std::to_string(items.size()) +
                  " items; save (inputs, targets) or (inputs,)");
      }
      inputs = items[0];
      if (items.size() == 2) targets = items[1];
    } else if (value.isGenericDict()) {
      for (const auto& entry : value.toGenericDict()) {
        const std::string key = entry.key().isString() ? entry.key().toStringRef() : "?";
        if (key == "inputs") {
          inputs = entry.value();
        } else if (key == "targets") {
          targets = entry.value();
        } else {
          fail_file("unknown key '" + key +
                    "'; the dict holds \"inputs\" and optionally "
                    "\"targets\"");
        }
      }
      if (inputs.isNone()) fail_file("the dict has no \"inputs\"; save {\"inputs\": ...}");
    } else {
      fail_file("holds a " + std::string(value.tagKind()) +
                ", not tensors; save (inputs, targets) or {\"inputs\": ..., \"targets\": ...}");
    }
    inputs_ = as_rows(inputs, "inputs");
    if (!targets.isNone()) targets_ = as_rows(targets, "targets");
    rows_ = inputs_.size(0);
    if (rows_ == 0) {
      fail_file("no rows (inputs " + shape_text(inputs_.sizes()) + "); save at least one sample");
    }
    if (targets_.defined() && targets_.size(0) != rows_) {
      fail_file("inputs have " + std::to_string(rows_) + " rows but targets " +
                std::to_string(targets_.size(0)) + "; save one target per input row");
    }
  }

  at::Tensor as_rows(const c10::IValue& value, const std::string& name) const {
    if (!value.isTensor()) {
      fail_file(name + " is a " + std::string(value.tagKind()) + ", not a tensor");
    }
    at::Tensor tensor = value.toTensor();
    if (tensor.dim() == 0) {
      fail_file(name + " is a scalar; save one row per sample along dim 0");
    }
    return tensor.contiguous();
  }

  // Fisher-Yates from a splitmix64 stream; two epochs cached since a microbatch can straddle
  // an epoch boundary.
  const std::vector<int64_t>& permutation(int64_t epoch) {
    auto found = permutations_.find(epoch);
    if (found != permutations_.end()) return found->second;
    if (permutations_.size() >= 2) permutations_.erase(permutations_.begin());
    std::vector<int64_t> perm(static_cast<size_t>(rows_));
    for (int64_t i = 0; i < rows_; ++i) perm[static_cast<size_t>(i)] = i;
    uint64_t state = sample_seed(config_.seed, kEpochStream, epoch);
    for (int64_t i = rows_ - 1; i > 0; --i) {
      state = splitmix64(state);
      std::swap(perm[static_cast<size_t>(i)],
                perm[static_cast<size_t>(uniform_below(state, i + 1))]);
    }
    return permutations_.emplace(epoch, std::move(perm)).first->second;
  }

  DataConfig config_;
  at::Tensor inputs_, targets_;
  int64_t rows_ = 0;
  std::map<int64_t, std::vector<int64_t>> permutations_;
};

void check_config(const DataConfig& config) {
  if (config.kind != "synthetic" && config.kind != "text" && config.kind != "tokens" &&
      config.kind != "tensors") {
    fail(ExitCode::kUsage, "unknown data kind '" + config.kind +
                               "'; pass --data-kind synthetic, text, tokens or tensors");
  }
  if (config.vocab_size <= 0) {
    fail(ExitCode::kUsage,
         "--vocab-size must be positive (got " + std::to_string(config.vocab_size) + ")");
  }
  if (config.kind == "synthetic") {
    if (config.input_dtype != "int64" && config.input_dtype != "float32") {
      fail(ExitCode::kUsage,
           "unknown --input-dtype '" + config.input_dtype + "'; pass int64 (token ids) or float32");
    }
    if (config.sample_shape.empty()) {
      fail(ExitCode::kUsage,
           "synthetic data needs --input-shape, one sample's shape (e.g. 64 for 64 tokens or "
           "3,32,32 for an image)");
    }
    for (int64_t size : config.sample_shape) {
      if (size <= 0) {
        fail(ExitCode::kUsage, "--input-shape " + shape_text(config.sample_shape) +
                                   " has a size below 1; every size must be positive");
      }
    }
    return;
  }
  if (config.path.empty()) {
    fail(ExitCode::kUsage, config.kind + " data needs a file; pass --data PATH");
  }
  if (config.kind != "tensors" && config.seq_len <= 0) {
    fail(ExitCode::kUsage, config.kind + " data needs --seq-len, the tokens per sample (got " +
                               std::to_string(config.seq_len) + ")");
  }
}

}  // namespace

DataSource::~DataSource() = default;

uint64_t sample_seed(uint64_t seed, uint64_t stream, int64_t id) {
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ static_cast<uint64_t>(id));
}

BatchSplit split_batch(int64_t global_batch, int world_size, int64_t microbatches) {
  if (global_batch <= 0) {
    fail(ExitCode::kUsage,
         "--global-batch must be positive (got " + std::to_string(global_batch) + ")");
  }
  if (microbatches <= 0) {
    fail(ExitCode::kUsage,
         "--microbatches must be positive (got " + std::to_string(microbatches) + ")");
  }
  if (world_size <= 0) {
    fail(ExitCode::kUsage, "world size must be positive (got " + std::to_string(world_size) + ")");
  }
  const int64_t parts = world_size * microbatches;
  if (global_batch % parts != 0) {
    const std::string n = std::to_string(parts);
    fail(ExitCode::kUsage, "global batch " + std::to_string(global_batch) +
                               " is not divisible by ranks x microbatches (" +
                               std::to_string(world_size) + " x " + std::to_string(microbatches) +
                               " = " + n + "); pick a multiple of " + n);
  }
  return BatchSplit{global_batch, world_size, microbatches};
}

std::unique_ptr<DataSource> open_data(const DataConfig& given, int rank, int world_size) {
  DataConfig config = given;
  if (config.kind == "synthetic" && config.sample_shape.empty() && config.seq_len > 0 &&
      config.input_dtype == "int64") {
    config.sample_shape = {config.seq_len};
  }
  check_config(config);
  const BatchSplit split = split_batch(config.global_batch, world_size, config.microbatches);
  if (rank < 0 || rank >= world_size) {
    fail(ExitCode::kUsage, "rank " + std::to_string(rank) + " is outside the world of " +
                               std::to_string(world_size) + " ranks");
  }
  if (config.kind == "synthetic") return std::make_unique<SyntheticSource>(config, split, rank);
  if (config.kind == "tensors") return std::make_unique<TensorSource>(config, split, rank);
  return std::make_unique<WindowSource>(config, split, rank);
}

std::string infer_data_kind(const std::string& data) {
  if (data == "synthetic") return "synthetic";
  const size_t slash = data.find_last_of('/');
  const size_t dot = data.find_last_of('.');
  const std::string extension =
      dot == std::string::npos || (slash != std::string::npos && dot < slash) ? ""
                                                                              : data.substr(dot);
  if (extension == ".txt") return "text";
  if (extension == ".bin") return "tokens";
  if (extension == ".pt" || extension == ".pth") return "tensors";
  fail(ExitCode::kUsage, "cannot tell the kind of data file " + data +
                             " from its extension (.txt text, .bin tokens, .pt tensors); pass "
                             "--data-kind text|tokens|tensors");
}

}  // namespace mfsdp::executor
