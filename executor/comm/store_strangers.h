#pragma once
// The rendezvous store's count of strangers (connections that have not proved the secret yet),
// by the address they come from, within a fixed number of places (docs/launch.md#security).
// When the places are full, the store gives up a stranger of the address holding the most, so
// a flood from one address pushes out only its own. Internal to StoreServer; one thread.

#include <atomic>
#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "executor/comm/store.h"

namespace mfsdp::executor {

class StrangerPlaces {
 public:
  // limits.max_strangers, or when it is 0 a quarter of this process's descriptor limit
  // (RLIMIT_NOFILE), between 16 and 1,024.
  explicit StrangerPlaces(const StoreLimits& limits);

  size_t places() const { return places_; }
  bool full() const { return held_ >= places_; }
  // A stranger from `host` came, or left (proved the secret, hung up or was dropped).
  void admit(const std::string& host);
  void release(const std::string& host);
  // The address holding the most strangers (the first of those in address order), or none.
  std::optional<std::string> most_held_address() const;
  // The most strangers held at once so far; readable from any thread.
  size_t most_held() const { return most_held_.load(); }

 private:
  size_t places_;
  std::map<std::string, size_t> at_;  // strangers held, by address
  size_t held_ = 0;                   // and in all
  std::atomic<size_t> most_held_{0};
};

}  // namespace mfsdp::executor
