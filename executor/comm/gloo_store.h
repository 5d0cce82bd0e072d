#pragma once
// Gloo's rendezvous reads and writes addresses through gloo::rendezvous::Store; ours is the
// authenticated rendezvous store (store.h). This adapter lets Gloo use it, under a key prefix.

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

namespace mfsdp::executor {

class StoreClient;

class GlooStore final : public gloo::rendezvous::Store {
 public:
  // `store` must outlive the adapter. Every key is put under `prefix`. Gets and waits without
  // an explicit timeout wait up to `timeout`.
  GlooStore(StoreClient& store, std::string prefix, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  StoreClient& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace mfsdp::executor
