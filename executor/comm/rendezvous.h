#pragma once
// Meeting the other ranks: torchrun's environment contract and mfsdp's rendezvous store
// (store.h), which admits only processes that prove the run's shared secret. Rank 0 hosts the
// store unless the launcher hosts it (MFSDP_AGENT_STORE=1, as torchrun's agent does), in which
// case every rank connects as a client. Every communicator is created through one Rendezvous,
// with its own key prefix, so several can be created in any order.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "executor/comm/gloo_communicator.h"

namespace mfsdp::executor {

struct LaunchEnv {
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  bool agent_store = false;  // the launcher hosts the store
  std::string secret;        // what every rank and the store prove to each other
  std::string bind_addr;     // where rank 0's store listens; empty: MASTER_ADDR

  // Reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
  // MFSDP_AGENT_STORE and MFSDP_RDZV_BIND, and the secret (rendezvous_secret_from_environment;
  // a world of one rank makes up its own). Throws Error(kRuntime) naming the missing or
  // malformed variable, Error(kUsage) for a missing or unusable secret.
  static LaunchEnv from_environment();
};

// The shortest secret accepted, in bytes.
constexpr size_t kMinSecretBytes = 16;

// A fresh secret for one run: 32 random bytes as 64 hex digits.
std::string new_rendezvous_secret();

// The secret this process was given: MFSDP_RDZV_SECRET, or the first line of the file
// MFSDP_RDZV_SECRET_FILE names; std::nullopt when neither is set. Throws Error(kUsage) when
// both are set, the secret is shorter than kMinSecretBytes, or the file cannot be read or
// other users may read it.
std::optional<std::string> rendezvous_secret_from_environment();

// The launcher's side (torchrun's agent store): hosts the store that ranks started with
// MFSDP_AGENT_STORE=1 connect to, for as long as this object lives, so it outlasts any rank.
class StoreHost {
 public:
  // Listens on `bind` at `port`; port 0 lets the system pick a free one (see port()). The
  // ranks must be given secret() (as MFSDP_RDZV_SECRET). Throws Error(kRuntime) when the
  // address cannot be bound.
  explicit StoreHost(int port, const std::string& bind = "127.0.0.1");
  ~StoreHost();
  StoreHost(const StoreHost&) = delete;
  StoreHost& operator=(const StoreHost&) = delete;

  int port() const;
  const std::string& secret() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Rendezvous {
 public:
  // Connects to (or, on rank 0, hosts) the store; waits up to `timeout` for the others.
  Rendezvous(const LaunchEnv& env, std::chrono::milliseconds timeout);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int rank() const;
  int world_size() const;

  // Every rank contributes `value` under `key`; returns all values in rank order.
  std::vector<std::string> exchange(const std::string& key, const std::string& value);

  // A Gloo communicator over `group` (global ranks, ascending, containing this rank), bound to
  // `stream`. `name` must be unique per communicator and equal on all members; collectives
  // time out after `timeout` and then fail with Error(kRuntime) naming rank and `what`.
  // Creating one connects its members: it blocks until all of them have called it (waiting
  // up to the longer of the two timeouts), so members that share several communicators must
  // create them in the same order. Groups that do not overlap need no common order.
  // Invalid groups and reused names are Error(kInternal).
  std::unique_ptr<GlooCommunicator> gloo_communicator(const std::string& name,
                                                      const std::vector<int>& group, Stream& stream,
                                                      std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mfsdp::executor
