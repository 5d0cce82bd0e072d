#pragma once
// Device tests call MFSDP_REQUIRE_GPU() first: without a usable GPU they are skipped with
// CUDA's reason. (ncclGetUniqueId works without a GPU, so it is no probe.)

#include <gtest/gtest.h>

#include "executor/runtime/cuda_device.h"

#define MFSDP_REQUIRE_GPU()                                                                  \
  do {                                                                                       \
    const ::mfsdp::executor::DeviceCount visible = ::mfsdp::executor::query_device_count();  \
    if (visible.count == 0) {                                                                \
      GTEST_SKIP() << "no CUDA device ("                                                     \
                   << (visible.error.empty() ? "cudaGetDeviceCount found 0" : visible.error) \
                   << ")";                                                                   \
    }                                                                                        \
  } while (0)
