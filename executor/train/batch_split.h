#pragma once
// The base of every data source (data_sources.h): batch(step, microbatch) as the samples with
// the global ids that the split gives this rank. split_batch() (data.h) is defined beside it.

#include <cstdint>

#include "executor/train/data.h"

namespace mfsdp::executor {

// The part every kind shares: which global ids a (step, microbatch) of this rank holds.
class SplitSource : public DataSource {
 public:
  SplitSource(BatchSplit split, int rank) : split_(split), rank_(rank) {}

  Batch batch(int64_t step, int64_t microbatch) final;

 protected:
  // The samples with global ids first .. first+count-1, stacked along dim 0.
  virtual Batch samples(int64_t first, int64_t count) = 0;

 private:
  BatchSplit split_;
  int rank_;
};

}  // namespace mfsdp::executor
