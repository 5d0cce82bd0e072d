#pragma once
// Sums and products of a plan's sizes, which are int64_t: none instead of a wrapped value when
// the exact result does not fit, so huge inputs get a message rather than undefined behaviour.

#include <cstdint>
#include <optional>

namespace mfsdp::schema {

inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

}  // namespace mfsdp::schema
