#pragma once
// Training data for `mfsdp run`: where samples come from and how one global batch per step is
// split over ranks and microbatches. Every sample is a pure function of (seed, global sample
// id), so any world size sees the same global batch and the data position is just the step.
//
//   auto data = open_data(config, rank, world_size);  // validates; throws mfsdp::Error
//   Batch b = data->batch(step, microbatch);
//
// The kinds, file formats and the split are described in docs/data.md.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace mfsdp::executor {

struct DataConfig {
  std::string kind = "synthetic";     // synthetic | text | tokens | tensors
  std::string path;                   // the file of text, tokens and tensors
  std::vector<int64_t> sample_shape;  // synthetic: one sample's input shape ({seq} or {3,32,32})
  std::string input_dtype = "int64";  // synthetic: int64 (ids in [0, vocab)) or float32 (N(0,1))
  int64_t seq_len = 0;                // text, tokens: input tokens per sample (synthetic int64:
                                      // the shape {seq_len} when sample_shape is empty)
  int64_t vocab_size = 256;           // every token id must be below it
  uint64_t seed = 0;
  int64_t global_batch = 0;  // samples per optimizer step, over all ranks and microbatches
  int64_t microbatches = 1;
};

// One microbatch of one rank. `input` and `target` have the microbatch's samples as dim 0;
// `target` is undefined when the data has none (synthetic float32, tensors without targets).
struct Batch {
  at::Tensor input;
  at::Tensor target;
  at::Tensor sample_ids;  // int64 [samples]: the global ids of the rows
};

// Step s's global batch is the ids s*B .. s*B+B-1; rank r's microbatch m is the contiguous
// block of per_microbatch() ids that starts at first_sample(s, r, m).
struct BatchSplit {
  int64_t global_batch = 0;
  int world_size = 1;
  int64_t microbatches = 1;

  int64_t per_rank() const { return global_batch / world_size; }
  int64_t per_microbatch() const { return per_rank() / microbatches; }
  int64_t first_sample(int64_t step, int rank, int64_t microbatch) const {
    return step * global_batch + rank * per_rank() + microbatch * per_microbatch();
  }
};

// Throws Error(kUsage) unless B > 0, M > 0, W > 0 and W x M divides B.
BatchSplit split_batch(int64_t global_batch, int world_size, int64_t microbatches);

class DataSource {
 public:
  virtual ~DataSource();
  // Throws Error(kUsage) for a negative step or a microbatch outside [0, microbatches).
  virtual Batch batch(int64_t step, int64_t microbatch) = 0;
  // One line for the run log, e.g.
  // "text corpus.txt (45123 bytes, largest id 122), windows of 65, seed 0".
  virtual std::string describe() const = 0;
};

// Checks the configuration and opens its file (read once, or memory-mapped). Throws
// Error(kUsage) for a bad value, Error(kIo) for a file that cannot be read.
std::unique_ptr<DataSource> open_data(const DataConfig& config, int rank, int world_size);

// What open_data checks before it reads the data, plus that the file can be opened and, for
// tensors, is a torch.save archive: for the launcher, so that every rank does not report the
// same mistake after the workers have started. Throws as open_data does.
void check_data(const DataConfig& config);

// The kind for a --data value: "synthetic" stays synthetic; .txt is text, .bin tokens, .pt
// and .pth tensors. Throws Error(kUsage) for another extension, pointing at --data-kind, or
// Error(kIo) when a file of another extension does not exist (a typo in the name).
std::string infer_data_kind(const std::string& data);

// The seed of the random stream `stream` of sample `id` (a splitmix64 mix): the synthetic
// inputs, text and token window positions, and the losses' synthetic targets draw from it.
uint64_t sample_seed(uint64_t seed, uint64_t stream, int64_t id);

// Streams of sample_seed. Distinct so that, e.g., a synthetic MSE target does not repeat
// the input drawn for the same sample.
enum SampleStream : uint64_t {
  kInputStream = 1,
  kTargetStream = 2,
  kEpochStream = 3,  // tensors: the row permutation of each epoch (id = epoch)
};

}  // namespace mfsdp::executor
