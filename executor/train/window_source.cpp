// The text and tokens kinds of data (data_sources.h), read from a memory-mapped file.
#include <algorithm>
#include <string>

#include <torch/torch.h>

#include "executor/train/batch_split.h"
#include "executor/train/data_sources.h"
#include "executor/train/mapped_file.h"
#include "executor/train/sample_seed.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

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

}  // namespace

std::unique_ptr<DataSource> make_window_source(const DataConfig& config, BatchSplit split,
                                               int rank) {
  return std::make_unique<WindowSource>(config, split, rank);
}

}  // namespace mfsdp::executor
