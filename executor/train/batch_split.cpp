#include "executor/train/batch_split.h"

#include <string>

#include <torch/torch.h>

#include "schema/error.h"

namespace mfsdp::executor {
namespace {

at::Tensor id_range(int64_t first, int64_t count) {
  return at::arange(first, first + count, at::TensorOptions().dtype(at::kLong));
}

}  // namespace

Batch SplitSource::batch(int64_t step, int64_t microbatch) {
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

}  // namespace mfsdp::executor
