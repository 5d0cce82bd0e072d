#pragma once
// A one-rank world for in-process tests: the test hosts the store on a free port, and env
// points a rank (or a context) at it.

#include <chrono>

#include "executor/comm/rendezvous.h"

namespace mfsdp::executor {

struct OneRankWorld {
  StoreHost host{0};
  LaunchEnv env = [this] {
    LaunchEnv e;
    e.master_port = host.port();
    e.agent_store = true;
    e.secret = host.secret();
    return e;
  }();
};

}  // namespace mfsdp::executor
