#pragma once
// Gloo's rendezvous reads and writes addresses through gloo::rendezvous::Store; ours is a
// c10d::Store (the TCPStore torchrun and mfsdp run share). This adapter lets Gloo use it.

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

namespace c10d {
class Store;
}

namespace mfsdp::executor {

class GlooStore final : public gloo::rendezvous::Store {
 public:
  // `store` must outlive the adapter. Waits without an explicit timeout use `timeout`.
  GlooStore(c10d::Store& store, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  c10d::Store& store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace mfsdp::executor
