// The synthetic kind of data (data_sources.h): each sample drawn from (seed, sample id), token
// ids with next-token targets or float32 inputs without targets.
#include <string>
#include <vector>

#include <torch/torch.h>

#include "executor/train/batch_split.h"
#include "executor/train/data_sources.h"
#include "executor/train/tensor_text.h"

namespace mfsdp::executor {
namespace {

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

}  // namespace

std::unique_ptr<DataSource> make_synthetic_source(const DataConfig& config, BatchSplit split,
                                                  int rank) {
  return std::make_unique<SyntheticSource>(config, split, rank);
}

}  // namespace mfsdp::executor
