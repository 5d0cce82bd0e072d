#include "executor/comm/rendezvous.h"

#include <c10/util/Exception.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

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
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

// c10d 1.13 counts its connect timeout in whole seconds and gives up at once below one; the
// store gets at least this, and the waits here pass the caller's timeout explicitly.
constexpr std::chrono::milliseconds kMinStoreTimeout = std::chrono::seconds(1);

// c10::Error appends a C++ backtrace to what(); a user needs the first line.
std::string reason_of(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ",") + std::to_string(r);
  return text;
}

// Stored values carry one marker byte: c10d 1.13 sends an empty value's length with MSG_MORE
// and then nothing, so the reply sits in the kernel for TCP's 200 ms cork timeout.
std::vector<uint8_t> to_value(const std::string& text) {
  std::vector<uint8_t> value(text.size() + 1, 'v');
  std::copy(text.begin(), text.end(), value.begin() + 1);
  return value;
}

std::string from_value(const std::vector<uint8_t>& value) {
  return value.empty() ? std::string() : std::string(value.begin() + 1, value.end());
}

}  // namespace

struct StoreHost::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

StoreHost::StoreHost(int port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  if (port < 0 || port > 65535) {
    fail(ExitCode::kRuntime, "store port " + std::to_string(port) + " is out of range 0..65535");
  }
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = true;
  options.waitWorkers = false;  // the ranks meet each other in Rendezvous, not here
  options.timeout = std::max<std::chrono::milliseconds>(timeout, kMinStoreTimeout);
  try {
    // The server listens on every interface; only the host's own client uses loopback.
    impl_->store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  } catch (const std::exception& e) {
    fail(ExitCode::kRuntime,
         "cannot host the rendezvous store on port " + std::to_string(port) + ": " + reason_of(e));
  }
}

StoreHost::~StoreHost() = default;

int StoreHost::port() const {
  return impl_->store->getPort();
}

struct Rendezvous::Impl {
  LaunchEnv env;
  std::chrono::milliseconds timeout;
  bool hosting = false;  // this rank runs the store server
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::mutex mutex;
  std::map<std::string, int> exchange_rounds;  // a key may be exchanged more than once
  std::set<std::string> communicator_names;

  std::string where() const { return env.master_addr + ":" + std::to_string(env.master_port); }

  // Waits for `keys` (one per rank) and names the ranks that did not arrive in time.
  void wait_for_ranks(const std::vector<std::string>& keys, const std::string& what) {
    try {
      store->wait(keys, timeout);
      return;
    } catch (const std::exception& e) {
      std::vector<int> missing;
      try {
        for (size_t r = 0; r < keys.size(); ++r) {
          if (!store->check({keys[r]})) missing.push_back(static_cast<int>(r));
        }
      } catch (const std::exception&) {
        // The store itself is gone (its host exited); the first reason says so.
      }
      std::string reason = missing.empty()
                               ? reason_of(e)
                               : "rank(s) " + rank_list(missing) + " did not arrive within " +
                                     std::to_string(timeout.count()) + " ms";
      fail(ExitCode::kRuntime, "rank " + std::to_string(env.rank) + ": " + what +
                                   " via the store at " + where() + " failed: " + reason);
    }
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
      store->set(keys[env.rank], to_value(value));
      wait_for_ranks(keys, what);
      for (const std::string& k : keys) values.push_back(from_value(store->get(k)));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      fail(ExitCode::kRuntime, "rank " + std::to_string(env.rank) + ": " + what +
                                   " via the store at " + where() + " failed: " + reason_of(e));
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

  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = impl_->hosting;
  // With rank 0 hosting, the server lives until every rank has connected (c10d's init key).
  if (!env.agent_store) options.numWorkers = static_cast<size_t>(env.world_size);
  options.waitWorkers = !env.agent_store;
  options.timeout = std::max<std::chrono::milliseconds>(timeout, kMinStoreTimeout);
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const std::exception& e) {
    fail(ExitCode::kRuntime, "rank " + std::to_string(env.rank) + ": " +
                                 (impl_->hosting ? "cannot host the rendezvous store on "
                                                 : "cannot reach the rendezvous store at ") +
                                 impl_->where() + ": " + reason_of(e) +
                                 (impl_->hosting ? "; is MASTER_PORT in use?"
                                                 : "; is rank 0 (or the launcher) running?"));
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
    impl_->store->set(prefix + std::to_string(impl_->env.rank), to_value(""));
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
    auto store = c10::make_intrusive<c10d::PrefixStore>(
        "mfsdp/gloo/" + name + "/" + rank_list(group) + "/", impl_->store);
    GlooStore gloo_store(*store, std::max(timeout, impl_->timeout));
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context =
        std::make_shared<gloo::rendezvous::Context>(group_rank, static_cast<int>(group.size()));
    // Members may arrive as far apart as the rendezvous allows (one still loading its model);
    // only the collectives are held to the communicator's own timeout.
    context->setTimeout(std::max(timeout, impl_->timeout));
    context->connectFullMesh(gloo_store, device);
    context->setTimeout(timeout);
    return std::make_unique<GlooCommunicator>(std::move(context), stream, name, rank, timeout);
  } catch (const std::exception& e) {  // gloo::IoException, gloo::EnforceNotMet, c10::Error
    fail(ExitCode::kRuntime, label + ": connecting failed: " + reason_of(e));
  }
}

}  // namespace mfsdp::executor
