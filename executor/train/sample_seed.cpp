#include "executor/train/sample_seed.h"

#include "executor/train/data.h"

namespace mfsdp::executor {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int64_t uniform_below(uint64_t bits, int64_t count) {
  return static_cast<int64_t>(
      (static_cast<unsigned __int128>(bits) * static_cast<uint64_t>(count)) >> 64);
}

uint64_t sample_seed(uint64_t seed, uint64_t stream, int64_t id) {
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ static_cast<uint64_t>(id));
}

}  // namespace mfsdp::executor
