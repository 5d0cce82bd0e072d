#pragma once
// One blocking TCP connection to a key-value store (mfsdp's own, or torchrun's c10d TCPStore):
// every read and write is held to a deadline, so that a silent peer fails the rank instead of
// hanging it. Messages name the peer as the caller describes it ("the rendezvous store at ...").

#include <chrono>
#include <string>

#include "executor/comm/store.h"

namespace mfsdp::executor {

// The peer closed or reset the connection, or nothing listens at its address (yet).
class StoreHangup : public StoreError {
 public:
  using StoreError::StoreError;
};

class StoreConnection {
 public:
  using Clock = std::chrono::steady_clock;

  // `peer` names the other end in messages; `gone_hint` follows a hang-up ("its host has
  // probably exited").
  StoreConnection(std::string peer, std::string gone_hint);
  ~StoreConnection();
  StoreConnection(const StoreConnection&) = delete;
  StoreConnection& operator=(const StoreConnection&) = delete;

  // One attempt to connect to `host:port`, closing any earlier connection. StoreHangup when
  // nothing listens there; StoreError when the host cannot be resolved.
  void connect(const std::string& host, int port);
  bool is_open() const { return fd_ >= 0; }
  void close();

  // `what` names the exchange in the timeout message ("its greeting").
  void send_all(const std::string& bytes, Clock::time_point deadline, const std::string& what);
  std::string receive_exactly(size_t count, Clock::time_point deadline, const std::string& what);

 private:
  void wait_for(short events, Clock::time_point deadline, const std::string& what);

  std::string peer_;
  std::string gone_hint_;
  int fd_ = -1;
};

}  // namespace mfsdp::executor
