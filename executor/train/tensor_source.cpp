// The tensors kind of data (data_sources.h): the rows of a torch.save file.
#include <map>
#include <string>
#include <vector>

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include "executor/train/batch_split.h"
#include "executor/train/data_sources.h"
#include "executor/train/mapped_file.h"
#include "executor/train/sample_seed.h"
#include "executor/train/tensor_text.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

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

}  // namespace

std::unique_ptr<DataSource> make_tensor_source(const DataConfig& config, BatchSplit split,
                                               int rank) {
  return std::make_unique<TensorSource>(config, split, rank);
}

}  // namespace mfsdp::executor
