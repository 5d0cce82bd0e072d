#include "executor/comm/store_strangers.h"

#include <sys/resource.h>

#include <algorithm>

namespace mfsdp::executor {
namespace {

size_t stranger_places(const StoreLimits& limits) {
  if (limits.max_strangers > 0) return limits.max_strangers;
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur == RLIM_INFINITY) return 1024;
  return std::clamp<size_t>(static_cast<size_t>(files.rlim_cur) / 4, 16, 1024);
}

}  // namespace

StrangerPlaces::StrangerPlaces(const StoreLimits& limits) : places_(stranger_places(limits)) {}

void StrangerPlaces::admit(const std::string& host) {
  ++held_;
  ++at_[host];
  most_held_ = std::max(most_held_.load(), held_);
}

void StrangerPlaces::release(const std::string& host) {
  --held_;
  if (--at_[host] == 0) at_.erase(host);
}

std::optional<std::string> StrangerPlaces::most_held_address() const {
  if (at_.empty()) return std::nullopt;
  return std::max_element(at_.begin(), at_.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

}  // namespace mfsdp::executor
