#pragma once
// A client of torchrun's agent store: the c10d TCPStore that torchrun's agent hosts on
// MASTER_ADDR:MASTER_PORT for its workers (TORCHELASTIC_USE_AGENT_STORE=True). mfsdp uses it
// only to tell the other ranks where rank 0's own authenticated store listens (rendezvous.h);
// everything else goes through that store. c10d's store is unauthenticated: anyone who can
// reach the port can read and write it.
//
// Two wire protocols are spoken, and told apart on connecting without waiting on a timer:
//   kValidated  torch 2.1 and later: every connection opens with VALIDATE and a magic number
//   kLegacy     torch 2.0 and earlier (Debian's LibTorch 1.13): no VALIDATE, and every query
//               type one lower (SET is 0, not 1)
// Integers are 8-byte little-endian lengths and values; strings are a length and the bytes.

#include <chrono>
#include <memory>
#include <string>

namespace mfsdp::executor {

class StoreConnection;

class TorchrunStore {
 public:
  enum class Protocol { kValidated, kLegacy };

  // Connects to `host:port`, retrying until `timeout` while nothing listens there, and finds
  // out which protocol the store speaks. Throws StoreError naming the store.
  TorchrunStore(const std::string& host, int port, std::chrono::milliseconds timeout);
  ~TorchrunStore();
  TorchrunStore(const TorchrunStore&) = delete;
  TorchrunStore& operator=(const TorchrunStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // The value of `key`, waiting up to `timeout` for some rank to set it.
  std::string get(const std::string& key, std::chrono::milliseconds timeout);

  Protocol protocol() const { return protocol_; }
  const std::string& address() const { return where_; }

 private:
  void open(std::chrono::steady_clock::time_point deadline);
  uint8_t query(uint8_t validated_code) const;

  std::string host_;
  int port_ = 0;
  std::string where_;
  std::chrono::milliseconds timeout_;
  Protocol protocol_ = Protocol::kValidated;
  std::unique_ptr<StoreConnection> connection_;
};

// Words for messages: "torch >= 2.1 (VALIDATE)" or "torch <= 2.0 (no VALIDATE)".
const char* protocol_name(TorchrunStore::Protocol protocol);

}  // namespace mfsdp::executor
