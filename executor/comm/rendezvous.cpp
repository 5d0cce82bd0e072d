#include "executor/comm/rendezvous.h"

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "executor/comm/gloo_communicator.h"
#include "executor/comm/gloo_store.h"
#include "executor/comm/outbound_address.h"
#include "executor/comm/store.h"
#include "executor/comm/torchrun_store.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

bool every_interface(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host == "*";
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ",") + std::to_string(r);
  return text;
}

struct StoreHost::Impl {
  std::string secret = new_rendezvous_secret();
  std::unique_ptr<StoreServer> server;
};

StoreHost::StoreHost(int port, const std::string& bind) : impl_(std::make_unique<Impl>()) {
  try {
    impl_->server = std::make_unique<StoreServer>(bind, port, impl_->secret);
  } catch (const StoreError& e) {
    fail(ExitCode::kRuntime, std::string("cannot host the rendezvous store: ") + e.what());
  }
}

StoreHost::~StoreHost() = default;

int StoreHost::port() const {
  return impl_->server->port();
}

const std::string& StoreHost::secret() const {
  return impl_->secret;
}

struct Rendezvous::Impl {
  LaunchEnv env;
  std::chrono::milliseconds timeout;
  bool hosting = false;                 // this rank runs the store server
  std::unique_ptr<StoreServer> server;  // declared before `store`: it must outlive it
  std::unique_ptr<StoreClient> store;
  std::mutex mutex;
  std::map<std::string, int> exchange_rounds;  // a key may be exchanged more than once
  std::set<std::string> communicator_names;

  std::string store_address;  // host:port of the store the ranks meet in

  std::string where() const { return store_address; }

  [[noreturn]] void fail_step(const std::string& what, const std::string& reason) const {
    fail(ExitCode::kRuntime, "rank " + std::to_string(env.rank) + ": " + what +
                                 " via the rendezvous store at " + where() + " failed: " + reason);
  }

  // Waits for `keys` (one per rank) and names the ranks that did not arrive in time.
  void wait_for_ranks(const std::vector<std::string>& keys, const std::string& what) {
    if (store->wait(keys, timeout)) return;
    std::vector<int> missing;
    for (size_t r = 0; r < keys.size(); ++r) {
      if (!store->check({keys[r]})) missing.push_back(static_cast<int>(r));
    }
    fail_step(what, "rank(s) " + rank_list(missing) + " did not arrive within " +
                        std::to_string(timeout.count()) + " ms");
  }

  // Every rank sets its value, then reads all; `what` names the step in errors.
  std::vector<std::string> exchange(const std::string& key, const std::string& value,
                                    const std::string& what) {
    std::string round_prefix;
    {
      std::lock_guard<std::mutex> lock(mutex);
      round_prefix = "mfsdp/exchange/" + key + "/" + std::to_string(exchange_rounds[key]++) + "/";
    }
    std::vector<std::string> keys;
    for (int r = 0; r < env.world_size; ++r) keys.push_back(round_prefix + std::to_string(r));
    std::vector<std::string> values;
    try {
      store->set(keys[env.rank], value);
      wait_for_ranks(keys, what);
      for (const std::string& k : keys) values.push_back(store->get(k, timeout));
    } catch (const StoreError& e) {
      fail_step(what, e.what());
    }
    return values;
  }
};

Rendezvous::Rendezvous(const LaunchEnv& env, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size) {
    fail(ExitCode::kRuntime, "rank " + std::to_string(env.rank) + " is not in a world of size " +
                                 std::to_string(env.world_size));
  }
  if (env.secret.size() < kMinSecretBytes) {
    fail(ExitCode::kInternal, "rank " + std::to_string(env.rank) +
                                  ": the rendezvous secret is missing or shorter than " +
                                  std::to_string(kMinSecretBytes) + " bytes");
  }
  // Gloo writes to peers with writev(2): once a peer has died, the next write would raise
  // SIGPIPE and kill this rank before it can report which collective failed. (Python, and so
  // torchrun's usual workers, ignore SIGPIPE at start-up already.)
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  impl_->env = env;
  impl_->timeout = timeout;
  impl_->hosting = !env.agent_store && env.rank == 0;
  // Under torchrun, its agent's store (unauthenticated) carries one thing: where rank 0's own
  // store listens. Everything else goes through that store, behind the secret.
  const bool via_torchrun = env.torchrun_store && !env.agent_store;
  const std::string rank_name = "rank " + std::to_string(env.rank);
  std::unique_ptr<TorchrunStore> torchrun;
  const std::string address_key = "mfsdp/" + env.torchrun_run_id + "/attempt_" +
                                  std::to_string(env.restart_count) + "/store_address";
  if (via_torchrun) {
    try {
      torchrun = std::make_unique<TorchrunStore>(env.master_addr, env.master_port, timeout);
    } catch (const StoreError& e) {
      fail(ExitCode::kRuntime, rank_name + ": " + e.what() +
                                   " (TORCHELASTIC_USE_AGENT_STORE=True: is torchrun's agent "
                                   "running, and MASTER_ADDR:MASTER_PORT its store?)");
    }
  }

  // Rank 0 listens where the user said (MFSDP_RDZV_BIND), else on the address the other ranks
  // are told to reach (MASTER_ADDR, or under torchrun this host's address on the route to it):
  // loopback for a single-node run, never every interface unless asked to.
  std::string connect_to = env.master_addr;
  int port = env.master_port;
  if (impl_->hosting) {
    std::string bind = env.bind_addr;
    if (bind.empty()) {
      bind = via_torchrun ? outbound_address(env.master_addr, env.master_port) : env.master_addr;
    }
    try {
      // Under torchrun MASTER_PORT is the agent's: rank 0's store takes any free port.
      impl_->server =
          std::make_unique<StoreServer>(bind, via_torchrun ? 0 : env.master_port, env.secret);
    } catch (const StoreError& e) {
      fail(ExitCode::kRuntime,
           "rank 0: cannot host the rendezvous store: " + std::string(e.what()) +
               (via_torchrun ? "" : "; is MASTER_PORT in use?"));
    }
    if (!every_interface(bind)) {
      connect_to = bind;
    } else if (via_torchrun) {
      connect_to = outbound_address(env.master_addr, env.master_port);
    }
    port = impl_->server->port();
    if (via_torchrun) {
      try {
        torchrun->set(address_key, connect_to + " " + std::to_string(port));
      } catch (const StoreError& e) {
        fail(ExitCode::kRuntime,
             "rank 0: cannot publish its store's address: " + std::string(e.what()));
      }
    }
  } else if (via_torchrun) {
    std::string published;
    try {
      published = torchrun->get(address_key, timeout);
    } catch (const StoreError& e) {
      fail(ExitCode::kRuntime,
           rank_name + ": rank 0's store address: " + e.what() + "; is rank 0 running?");
    }
    const size_t space = published.rfind(' ');
    int published_port = 0;
    if (space != std::string::npos) {
      published_port = std::atoi(published.c_str() + space + 1);
      connect_to = published.substr(0, space);
    }
    if (space == std::string::npos || published_port < 1 || published_port > 65535) {
      fail(ExitCode::kRuntime, rank_name + ": torchrun's store at " + torchrun->address() +
                                   " holds '" + published + "' under " + address_key +
                                   ", not an address and port; another program wrote it");
    }
    port = published_port;
  }
  impl_->store_address = connect_to + ":" + std::to_string(port);
  try {
    impl_->store = std::make_unique<StoreClient>(connect_to, port, env.secret, timeout);
  } catch (const StoreError& e) {
    fail(ExitCode::kRuntime, rank_name + ": " + e.what() +
                                 (impl_->hosting ? "" : "; is rank 0 (or the launcher) running?"));
  }
  impl_->exchange("mfsdp/join", "", "joining the other ranks");
}

Rendezvous::~Rendezvous() {
  // Rank 0's store must outlive every rank's last use of it (a subgroup may still be
  // connecting), so on a normal exit it waits for the others to leave. While unwinding from
  // a failure it does not: the others are failing too, and may be gone.
  if (impl_->env.agent_store || impl_->env.world_size == 1) return;
  // Nor does any rank say goodbye then: the store's host may be the rank that stopped, and the
  // goodbye would wait a whole timeout for it before this rank could report its failure.
  if (std::uncaught_exceptions() > 0) return;
  try {
    const std::string prefix = "mfsdp/leave/";
    impl_->store->set(prefix + std::to_string(impl_->env.rank), "");
    if (impl_->hosting) {
      std::vector<std::string> keys;
      for (int r = 0; r < impl_->env.world_size; ++r) keys.push_back(prefix + std::to_string(r));
      impl_->store->wait(keys, impl_->timeout);
    }
  } catch (const std::exception&) {
    // Leaving is best effort: a rank that cannot say goodbye has already failed elsewhere.
  }
}

int Rendezvous::rank() const {
  return impl_->env.rank;
}
int Rendezvous::world_size() const {
  return impl_->env.world_size;
}

std::vector<std::string> Rendezvous::exchange(const std::string& key, const std::string& value) {
  return impl_->exchange(key, value, "exchange of '" + key + "'");
}

std::unique_ptr<GlooCommunicator> Rendezvous::gloo_communicator(const std::string& name,
                                                                const std::vector<int>& group,
                                                                Stream& stream,
                                                                std::chrono::milliseconds timeout) {
  const int rank = impl_->env.rank;
  const std::string label = "rank " + std::to_string(rank) + ": communicator '" + name +
                            "' over ranks {" + rank_list(group) + "}";
  int group_rank = -1;
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] < 0 || group[i] >= impl_->env.world_size || (i > 0 && group[i] <= group[i - 1])) {
      fail(ExitCode::kInternal, label + ": the group must list distinct ranks of 0.." +
                                    std::to_string(impl_->env.world_size - 1) +
                                    " in ascending order");
    }
    if (group[i] == rank) group_rank = static_cast<int>(i);
  }
  if (group_rank < 0) fail(ExitCode::kInternal, label + ": this rank is not a member");
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (!impl_->communicator_names.insert(name).second) {
      fail(ExitCode::kInternal, label + ": the name is already taken by another communicator");
    }
  }

  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface != nullptr && *iface != '\0') {
    attr.iface = iface;
  } else {
    attr.hostname = outbound_address(impl_->env.master_addr, impl_->env.master_port);
  }
  try {
    GlooStore gloo_store(*impl_->store, "mfsdp/gloo/" + name + "/" + rank_list(group) + "/",
                         std::max(timeout, impl_->timeout));
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context =
        std::make_shared<gloo::rendezvous::Context>(group_rank, static_cast<int>(group.size()));
    // Members may arrive as far apart as the rendezvous allows (one still loading its model);
    // only the collectives are held to the communicator's own timeout.
    context->setTimeout(std::max(timeout, impl_->timeout));
    context->connectFullMesh(gloo_store, device);
    context->setTimeout(timeout);
    return std::make_unique<GlooCommunicator>(std::move(context), stream, name, rank, timeout);
  } catch (const std::exception& e) {  // gloo::IoException, gloo::EnforceNotMet, StoreError
    fail(ExitCode::kRuntime, label + ": connecting failed: " + e.what());
  }
}

}  // namespace mfsdp::executor
