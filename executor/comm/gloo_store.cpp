#include "executor/comm/gloo_store.h"

#include <utility>

#include "executor/comm/store.h"

namespace mfsdp::executor {

GlooStore::GlooStore(StoreClient& store, std::string prefix, std::chrono::milliseconds timeout)
    : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_.set(prefix_ + key, std::string(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  const std::string value = store_.get(prefix_ + key, timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  std::vector<std::string> prefixed;
  for (const std::string& key : keys) prefixed.push_back(prefix_ + key);
  if (!store_.wait(prefixed, timeout)) {
    throw StoreError("the other members' addresses did not all arrive in the rendezvous store at " +
                     store_.address() + " within " + std::to_string(timeout.count()) + " ms");
  }
}

}  // namespace mfsdp::executor
