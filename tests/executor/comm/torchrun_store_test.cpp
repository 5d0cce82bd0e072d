// TorchrunStore against stand-ins for the three c10d TCPStore servers it may meet (torch >= 2.4
// answering PING, torch 2.1-2.3 that hang up on it, torch <= 2.0 with no VALIDATE), each
// behaving as c10d's server code does on the bytes it is sent; and a rendezvous through one,
// which must put nothing in the unauthenticated store but rank 0's address. The real torchrun
// agents are tested in tests/run/torchrun_test.cpp.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "executor/comm/launch_env.h"
#include "executor/comm/rendezvous.h"
#include "executor/comm/store.h"
#include "executor/comm/torchrun_store.h"
#include "schema/error.h"

namespace mfsdp::executor {
namespace {

using namespace std::chrono_literals;

enum class Dialect { kPing, kNoPing, kLegacy };

// One c10d store on 127.0.0.1, a thread per connection, blocking reads.
class FakeC10dStore {
 public:
  explicit FakeC10dStore(Dialect dialect) : dialect_(dialect) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (bind(listener_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        listen(listener_, 16) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ADD_FAILURE() << "cannot listen: " << std::strerror(errno);
    }
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~FakeC10dStore() {
    stopping_ = true;
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    acceptor_.join();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int fd : open_) shutdown(fd, SHUT_RDWR);
      changed_.notify_all();
    }
    for (std::thread& t : handlers_) t.join();
  }

  int port() const { return port_; }
  std::map<std::string, std::string> keys() {
    std::lock_guard<std::mutex> lock(mutex_);
    return keys_;
  }
  void put(const std::string& key, const std::string& value) {
    std::lock_guard<std::mutex> lock(mutex_);
    keys_[key] = value;
    changed_.notify_all();
  }
  int hangups() const { return hangups_; }
  // Blocks until `count` waits are pending on the server.
  void await_waiters(int count) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return waiters_ >= count; });
  }

 private:
  static bool read_exactly(int fd, void* out, size_t n) {
    return n == 0 || recv(fd, out, n, MSG_WAITALL) == static_cast<ssize_t>(n);
  }
  template <typename T>
  static bool read_value(int fd, T& value) {
    return read_exactly(fd, &value, sizeof value);
  }
  // c10d's strings: an 8-byte length, then the bytes. A length no vector can hold throws in
  // c10d's server, which then closes the connection.
  static bool read_string(int fd, std::string& text) {
    uint64_t size = 0;
    if (!read_value(fd, size) || size > (uint64_t{1} << 40)) return false;
    text.resize(size);
    return read_exactly(fd, text.data(), size);
  }
  template <typename T>
  static void write_value(int fd, T value) {
    send(fd, &value, sizeof value, MSG_NOSIGNAL);
  }

  void accept_loop() {
    while (!stopping_) {
      const int fd = accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      std::lock_guard<std::mutex> lock(mutex_);
      open_.push_back(fd);
      handlers_.emplace_back([this, fd] {
        serve(fd);
        close(fd);
      });
    }
  }

  // Query types as the validated protocol numbers them; the legacy one is one lower.
  enum : uint8_t { kValidate = 0, kSet = 1, kGet = 3, kWait = 6, kNumKeys = 7, kPing = 13 };

  void serve(int fd) {
    bool validated = dialect_ == Dialect::kLegacy;
    for (;;) {
      uint8_t command = 0;
      if (!read_value(fd, command)) return;
      if (!validated) {
        uint32_t magic = 0;
        if (command != kValidate) {
          if (dialect_ == Dialect::kPing) {  // libuv: ignores the client from then on
            while (read_value(fd, command)) {
            }
          }
          ++hangups_;
          return;
        }
        if (!read_value(fd, magic) || magic != 0x3C85F7CE) return;
        validated = true;
        continue;
      }
      if (dialect_ == Dialect::kLegacy) ++command;
      std::string key;
      if (command == kSet) {
        std::string value;
        if (!read_string(fd, key) || !read_string(fd, value)) break;
        put(key, value);
      } else if (command == kGet) {
        if (!read_string(fd, key)) break;
        std::string value;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          value = keys_.at(key);
        }
        write_value<uint64_t>(fd, value.size());
        send(fd, value.data(), value.size(), MSG_NOSIGNAL);
      } else if (command == kWait) {
        uint64_t count = 0;
        if (!read_value(fd, count)) break;
        std::vector<std::string> wanted(count);
        for (std::string& k : wanted) {
          if (!read_string(fd, k)) return;
        }
        std::unique_lock<std::mutex> lock(mutex_);
        ++waiters_;
        changed_.notify_all();
        changed_.wait(lock, [&] {
          if (stopping_) return true;
          for (const std::string& k : wanted) {
            if (keys_.count(k) == 0) return false;
          }
          return true;
        });
        if (stopping_) return;
        write_value<uint8_t>(fd, 0);  // STOP_WAITING
      } else if (command == kNumKeys) {
        std::lock_guard<std::mutex> lock(mutex_);
        write_value<int64_t>(fd, static_cast<int64_t>(keys_.size()));
      } else if (command == kPing && dialect_ == Dialect::kPing) {
        uint32_t nonce = 0;
        if (!read_value(fd, nonce)) break;
        write_value(fd, nonce);
      } else {
        break;  // an unknown query: the server closes the connection
      }
    }
    ++hangups_;
  }

  Dialect dialect_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> hangups_{0};
  std::thread acceptor_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> keys_;
  std::vector<int> open_;
  int waiters_ = 0;
  std::vector<std::thread> handlers_;
};

class TorchrunStoreDialects : public ::testing::TestWithParam<Dialect> {};

TEST_P(TorchrunStoreDialects, TellsTheProtocolApartAndSetsAndGets) {
  FakeC10dStore server(GetParam());
  TorchrunStore writer("127.0.0.1", server.port(), 5s);
  TorchrunStore reader("127.0.0.1", server.port(), 5s);
  const auto expected = GetParam() == Dialect::kLegacy ? TorchrunStore::Protocol::kLegacy
                                                       : TorchrunStore::Protocol::kValidated;
  EXPECT_EQ(writer.protocol(), expected);
  EXPECT_EQ(reader.protocol(), expected);

  std::thread later([&] {
    server.await_waiters(1);  // the reader asked before the key was set, and must wait
    writer.set("mfsdp/address", std::string("10.0.0.1 4\0", 11));
  });
  EXPECT_EQ(reader.get("mfsdp/address", 5s), std::string("10.0.0.1 4\0", 11));
  later.join();
  EXPECT_EQ(
      server.keys(),
      (std::map<std::string, std::string>{{"mfsdp/address", std::string("10.0.0.1 4\0", 11)}}));
}

INSTANTIATE_TEST_SUITE_P(Servers, TorchrunStoreDialects,
                         ::testing::Values(Dialect::kPing, Dialect::kNoPing, Dialect::kLegacy),
                         [](const auto& info) {
                           switch (info.param) {
                             case Dialect::kPing:
                               return std::string("Torch24AndLater");
                             case Dialect::kNoPing:
                               return std::string("Torch21To23");
                             default:
                               return std::string("Torch20AndEarlier");
                           }
                         });

TEST(TorchrunStore, TheLegacyProbeCostsTheServerOneDroppedConnection) {
  FakeC10dStore server(Dialect::kLegacy);
  TorchrunStore store("127.0.0.1", server.port(), 5s);
  store.set("k", "v");
  EXPECT_EQ(store.get("k", 1s), "v");
  EXPECT_EQ(server.hangups(), 1);  // the VALIDATE + PING connection, dropped at once
}

TEST(TorchrunStore, AKeyNeverSetTimesOutNamingIt) {
  FakeC10dStore server(Dialect::kPing);
  TorchrunStore store("127.0.0.1", server.port(), 5s);
  try {
    store.get("mfsdp/never", 100ms);
    ADD_FAILURE() << "no StoreError";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("'mfsdp/never' was not set in torchrun's store at "
                                         "127.0.0.1:" +
                                         std::to_string(server.port()) + " within 100 ms"),
              std::string::npos)
        << e.what();
  }
}

TEST(TorchrunStore, NothingListeningFailsAfterTheTimeout) {
  int port = 0;
  {
    FakeC10dStore gone(Dialect::kPing);
    port = gone.port();
  }
  try {
    TorchrunStore store("127.0.0.1", port, 200ms);
    ADD_FAILURE() << "no StoreError";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach torchrun's store at 127.0.0.1:" +
                                         std::to_string(port) + " within 200 ms"),
              std::string::npos)
        << e.what();
  }
}

// Two ranks meet through the agent's store as torchrun starts them: rank 0's own store, on a
// port of its own, is all the agent's store learns about.
TEST(TorchrunStore, RendezvousPublishesOnlyRankZerosAddress) {
  FakeC10dStore agent(Dialect::kPing);
  std::vector<std::string> outcome(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      LaunchEnv env;
      env.master_addr = "127.0.0.1";
      env.master_port = agent.port();
      env.rank = r;
      env.world_size = 2;
      env.local_rank = r;
      env.local_world_size = 2;
      env.torchrun_store = true;
      env.torchrun_run_id = "run7";
      env.restart_count = 2;
      env.secret = "the right secret, 32 bytes long.";
      try {
        Rendezvous rendezvous(env, 10s);
        const std::vector<std::string> values =
            rendezvous.exchange("greeting", "from " + std::to_string(r));
        outcome[r] = values.at(0) + "," + values.at(1);
      } catch (const Error& e) {
        outcome[r] = e.what();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(outcome[0], "from 0,from 1");
  EXPECT_EQ(outcome[1], "from 0,from 1");
  const std::map<std::string, std::string> keys = agent.keys();
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys.begin()->first, "mfsdp/run7/attempt_2/store_address");
  const std::string& address = keys.begin()->second;
  ASSERT_EQ(address.rfind("127.0.0.1 ", 0), 0u) << address;
  EXPECT_NE(std::stoi(address.substr(10)), agent.port());
}

TEST(TorchrunStore, ARankGivenGarbageForTheAddressSaysSo) {
  FakeC10dStore agent(Dialect::kPing);
  agent.put("mfsdp/r/attempt_0/store_address", "not an address");
  LaunchEnv env;
  env.master_addr = "127.0.0.1";
  env.master_port = agent.port();
  env.rank = 1;
  env.world_size = 2;
  env.local_rank = 1;
  env.local_world_size = 2;
  env.torchrun_store = true;
  env.torchrun_run_id = "r";
  env.secret = "the right secret, 32 bytes long.";
  try {
    Rendezvous rendezvous(env, 2s);
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_NE(std::string(e.what()).find("holds 'not an address' under "
                                         "mfsdp/r/attempt_0/store_address, not an address and "
                                         "port"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mfsdp::executor
