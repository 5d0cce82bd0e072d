#pragma once
// The kinds of data that open_data() (data.h) opens, one file each: synthetic_source.cpp,
// window_source.cpp (text and tokens) and tensor_source.cpp. Each takes a checked config.

#include <memory>

#include "executor/train/data.h"

namespace mfsdp::executor {

std::unique_ptr<DataSource> make_synthetic_source(const DataConfig& config, BatchSplit split,
                                                  int rank);
std::unique_ptr<DataSource> make_window_source(const DataConfig& config, BatchSplit split,
                                               int rank);
std::unique_ptr<DataSource> make_tensor_source(const DataConfig& config, BatchSplit split,
                                               int rank);

}  // namespace mfsdp::executor
