#include "executor/comm/gloo_store.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>

namespace mfsdp::executor {

GlooStore::GlooStore(c10d::Store& store, std::chrono::milliseconds timeout)
    : store_(store), timeout_(timeout) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_.set(key, std::vector<uint8_t>(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  std::vector<uint8_t> data = store_.get(key);
  return std::vector<char>(data.begin(), data.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  store_.wait(keys, timeout);
}

}  // namespace mfsdp::executor
