#pragma once
// The random draws behind every sample, internal to the data sources: the splitmix64 mix that
// sample_seed() (data.h) is made of, and unbiased draws from its bits. No LibTorch.

#include <cstdint>

namespace mfsdp::executor {

uint64_t splitmix64(uint64_t x);

// A uniform draw in [0, count) from 64 random bits, without the bias of `bits % count`.
int64_t uniform_below(uint64_t bits, int64_t count);

}  // namespace mfsdp::executor
