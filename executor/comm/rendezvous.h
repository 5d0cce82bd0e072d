#pragma once
// Meeting the other ranks: torchrun's environment contract and mfsdp's rendezvous store
// (store.h), which admits only processes that prove the run's shared secret. Rank 0 hosts the
// store unless the launcher hosts it (MFSDP_AGENT_STORE=1, as torchrun's agent does), in which
// case every rank connects as a client. Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) rank 0
// hosts it on a free port and publishes that address in the agent's c10d store
// (torchrun_store.h). Every communicator is created through one Rendezvous,
// with its own key prefix, so several can be created in any order.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "executor/comm/gloo_communicator.h"
#include "executor/comm/launch_env.h"

namespace mfsdp::executor {

// Ranks as messages list them: "0,2,5".
std::string rank_list(const std::vector<int>& ranks);

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
