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

  std::string where() const { return env.master_addr + ":" + std::to_string(env.master_port); }

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

  // Rank 0 listens where the user said (MFSDP_RDZV_BIND), else on the address the other ranks
  // are told to reach (MASTER_ADDR): loopback for a single-node run, never every interface
  // unless asked to.
  const std::string bind = env.bind_addr.empty() ? env.master_addr : env.bind_addr;
  std::string connect_to = env.master_addr;
  if (impl_->hosting) {
    try {
      impl_->server = std::make_unique<StoreServer>(bind, env.master_port, env.secret);
    } catch (const StoreError& e) {
      fail(ExitCode::kRuntime, "rank 0: cannot host the rendezvous store: " +
                                   std::string(e.what()) + "; is MASTER_PORT in use?");
    }
    if (!every_interface(bind)) connect_to = bind;
  }
  try {
    impl_->store = std::make_unique<StoreClient>(connect_to, env.master_port, env.secret, timeout);
  } catch (const StoreError& e) {
    fail(ExitCode::kRuntime, "rank " + std::to_string(env.rank) + ": " + e.what() +
                                 (impl_->hosting ? "" : "; is rank 0 (or the launcher) running?"));
  }
  impl_->exchange("mfsdp/join", "", "joining the other ranks");
}

Rendezvous::~Rendezvous() {
  // Rank 0's store must outlive every rank's last use of it (a subgroup may still be
  // connecting), so on a normal exit it waits for the others to leave. While unwinding from
  // a failure it does not: the others are failing too, and may be gone.
  if (impl_->env.agent_store || impl_->env.world_size == 1) return;
  try {
    const std::string prefix = "mfsdp/leave/";
    impl_->store->set(prefix + std::to_string(impl_->env.rank), "");
    if (impl_->hosting && std::uncaught_exceptions() == 0) {
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
