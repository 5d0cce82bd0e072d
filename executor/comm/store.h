#pragma once
// The rendezvous store: a small key-value server on one TCP port, where the ranks publish
// what the others must know (join keys, Gloo addresses, exchanged values). Every connection
// must prove the run's shared secret before it may read or write a key, and the server must
// prove it back, so strangers and other runs on the same port are refused both ways
// (store_wire.h has the handshake). It is not TLS: the traffic itself is readable on the wire.

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mfsdp::executor {

// Store failures: unreachable, refused, timed out, lost. The message names the store.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the store holds for its connections at most (docs/launch.md, Security).
struct StoreLimits {
  // Connections that have not proved the secret yet, held at once. When one more arrives, the
  // store drops the oldest stranger from the address that holds the most, so strangers take
  // each other's places (never a rank's, which has proved the secret) and one address cannot
  // crowd out the others. 0: a quarter of the descriptors this process may open, 16..1024.
  size_t max_strangers = 0;
  // A stranger that has not proved the secret this soon after connecting is dropped.
  std::chrono::milliseconds hello_window{5000};
  // Keys, and bytes of keys and values, all connections together; a set beyond either is
  // answered with an error, not stored.
  size_t max_keys = size_t{1} << 20;
  size_t max_stored_bytes = size_t{512} << 20;
  // Answers one connection may leave unread before the store stops reading its requests.
  size_t max_unsent_bytes = size_t{64} << 20;
};

class StoreServer {
 public:
  // Listens on `host` (an address or name of this host; "0.0.0.0" or "::" for every
  // interface) at `port` (0 picks a free one) and serves on a thread of its own until
  // destroyed. Refused connections are reported on stderr. Throws StoreError when the
  // address cannot be bound.
  StoreServer(const std::string& host, int port, std::string secret, StoreLimits limits = {});
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  // How many connections were refused for not proving the secret (or not trying to), or
  // dropped to make room for newer ones.
  int refused() const;
  // The most strangers held at once, and the most unsent answer bytes of one connection.
  size_t max_strangers_held() const;
  size_t max_unsent_held() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class StoreClient {
 public:
  // Connects to `host:port`, retrying until `timeout` while nothing listens there, and
  // authenticates both ways. Requests that do not wait are held to `timeout` too.
  StoreClient(const std::string& host, int port, std::string secret,
              std::chrono::milliseconds timeout);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::string& value);
  // The value of `key`, waiting up to `timeout` for it to be set.
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  // Waits until every key is set; false if they were not all set within `timeout`.
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  bool check(const std::vector<std::string>& keys);

  const std::string& address() const;  // host:port, for messages

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mfsdp::executor
