#pragma once
// Meeting the other ranks: torchrun's environment contract and a c10d::TCPStore. Rank 0 hosts
// the store unless the launcher hosts it (MFSDP_AGENT_STORE=1, as torchrun's agent does), in
// which case every rank connects as a client. Every communicator is created through one
// Rendezvous, with its own key prefix, so several can be created in any order.

#include <chrono>
#include <memory>
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

  // Reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and
  // MFSDP_AGENT_STORE. Throws Error(kRuntime) naming the missing or malformed variable.
  static LaunchEnv from_environment();
};

// The launcher's side (torchrun's agent store): hosts the store that ranks started with
// MFSDP_AGENT_STORE=1 connect to, for as long as this object lives, so it outlasts any rank.
class StoreHost {
 public:
  // Listens on `port` on every interface; 0 lets the system pick a free port (see port()).
  // Throws Error(kRuntime) when the port cannot be bound.
  StoreHost(int port, std::chrono::milliseconds timeout);
  ~StoreHost();
  StoreHost(const StoreHost&) = delete;
  StoreHost& operator=(const StoreHost&) = delete;

  int port() const;

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
