#pragma once
// The ring model's factors for a group of `n` ranks (docs/predict.md#world-sizes): the hops a
// message takes, and the share of the unsharded bytes each rank moves (an all-reduce moves
// twice an all-gather's). Used to scale a measured world size to another and to build the
// built-in profiles from bus bandwidths. Internal to mfsdp_predict.

#include <cstdint>

namespace mfsdp::predict::ring {

inline double hops(int64_t n) {
  return static_cast<double>(n - 1);
}
inline double share(int64_t n) {
  return static_cast<double>(n - 1) / static_cast<double>(n);
}

}  // namespace mfsdp::predict::ring
