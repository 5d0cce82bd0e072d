// The rendezvous store against its ranks and against strangers: processes that do not know the
// secret, that speak another protocol, or that pose as the store.

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "executor/comm/store.h"
#include "executor/comm/store_wire.h"

namespace mfsdp::executor {
namespace {

using namespace std::chrono_literals;

const std::string kSecret = "the right secret, 32 bytes long.";

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const StoreError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no StoreError";
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A plain TCP connection to 127.0.0.1:port, as a stranger would open one.
int raw_connection(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads until the peer closes (or `limit` bytes); what a stranger learns from the store.
std::string read_until_closed(int fd, size_t limit = 4096) {
  std::string got;
  char buffer[512];
  timeval wait{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  while (got.size() < limit) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    got.append(buffer, static_cast<size_t>(n));
  }
  return got;
}

// A listening socket on 127.0.0.1 and a free port, for a test that poses as the store.
int loopback_listener(int& port) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      listen(listener, 4) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(listener);
    return -1;
  }
  port = ntohs(address.sin_port);
  return listener;
}

TEST(Store, RanksWithTheSecretSetGetWaitAndCheck) {
  StoreServer server("127.0.0.1", 0, kSecret);
  StoreClient a("127.0.0.1", server.port(), kSecret, 5s);
  StoreClient b("127.0.0.1", server.port(), kSecret, 5s);
  EXPECT_FALSE(a.check({"k"}));
  EXPECT_FALSE(a.wait({"k"}, 50ms));
  std::thread setter([&] { b.set("k", std::string("v\0w", 3)); });
  EXPECT_EQ(a.get("k", 5s), std::string("v\0w", 3));  // waits for the other client's set
  setter.join();
  b.set("empty", "");
  EXPECT_TRUE(a.wait({"k", "empty"}, 1s));
  EXPECT_TRUE(a.check({"k", "empty"}));
  EXPECT_EQ(a.get("empty", 1s), "");
  EXPECT_EQ(server.refused(), 0);
}

TEST(Store, GetOfAKeyNeverSetTimesOutNamingIt) {
  StoreServer server("127.0.0.1", 0, kSecret);
  StoreClient client("127.0.0.1", server.port(), kSecret, 5s);
  const std::string error = error_of([&] { client.get("never", 100ms); });
  EXPECT_TRUE(contains(error, "'never' was not set in the rendezvous store at 127.0.0.1:"))
      << error;
}

TEST(Store, RefusesAClientWithAnotherSecretAndKeepsServingTheOthers) {
  StoreServer server("127.0.0.1", 0, kSecret);
  StoreClient rank("127.0.0.1", server.port(), kSecret, 5s);
  rank.set("gloo/address/0", "10.0.0.1:4000");
  const std::string error = error_of([&] {
    StoreClient stranger("127.0.0.1", server.port(), "another run's secret, 32 bytes..", 5s);
  });
  EXPECT_TRUE(contains(error, "refused this rank's secret")) << error;
  EXPECT_EQ(server.refused(), 1);
  EXPECT_EQ(rank.get("gloo/address/0", 1s), "10.0.0.1:4000");
}

TEST(Store, AStrangerThatSendsGarbageLearnsNothingAndChangesNothing) {
  StoreServer server("127.0.0.1", 0, kSecret);
  StoreClient rank("127.0.0.1", server.port(), kSecret, 5s);
  rank.set("key", "value");
  const int fd = raw_connection(server.port());
  ASSERT_GE(fd, 0);
  // All a stranger gets is the greeting: the magic, the version and a nonce.
  std::string greeting(store_wire::kGreetingBytes, '\0');
  ASSERT_EQ(recv(fd, greeting.data(), greeting.size(), MSG_WAITALL),
            static_cast<ssize_t>(greeting.size()));
  EXPECT_EQ(greeting.compare(0, 8, "MFSDPRDZ"), 0);
  // A c10d TCPStore SET of "key" (what overwrote the Gloo addresses before), padded to more
  // than a hello.
  std::string attack(1, '\x00');
  attack += std::string("\x03\x00\x00\x00\x00\x00\x00\x00key", 11);
  attack += std::string(61, 'x');
  ASSERT_EQ(attack.size(), store_wire::kHelloBytes);
  ASSERT_GT(send(fd, attack.data(), attack.size(), MSG_NOSIGNAL), 0);
  EXPECT_EQ(read_until_closed(fd), "");  // and then the store hangs up
  close(fd);
  EXPECT_EQ(rank.get("key", 1s), "value");
  EXPECT_EQ(server.refused(), 1);
}

TEST(Store, ASilentStrangerDoesNotBlockTheRanks) {
  StoreServer server("127.0.0.1", 0, kSecret);
  const int fd = raw_connection(server.port());
  ASSERT_GE(fd, 0);
  StoreClient a("127.0.0.1", server.port(), kSecret, 5s);
  StoreClient b("127.0.0.1", server.port(), kSecret, 5s);
  a.set("k", "v");
  EXPECT_EQ(b.get("k", 1s), "v");
  close(fd);
}

TEST(Store, ClientRefusesAServerThatIsNotAStore) {
  int port = 0;
  const int listener = loopback_listener(port);
  ASSERT_GE(listener, 0);
  std::thread impostor([&] {
    const int fd = accept(listener, nullptr, nullptr);
    const std::string banner = "HTTP/1.1 400 Bad Request\r\n\r\n" + std::string(40, ' ');
    send(fd, banner.data(), banner.size(), MSG_NOSIGNAL);
    read_until_closed(fd);
    close(fd);
  });
  const std::string error = error_of([&] { StoreClient client("127.0.0.1", port, kSecret, 5s); });
  impostor.join();
  close(listener);
  EXPECT_TRUE(contains(error, "is not an mfsdp rendezvous store; another program holds the port"))
      << error;
}

// A server that greets like a store and accepts any hello, but cannot prove the secret: the
// client must not trust it with its keys.
TEST(Store, ClientRefusesAStoreThatCannotProveTheSecret) {
  int port = 0;
  const int listener = loopback_listener(port);
  ASSERT_GE(listener, 0);
  std::thread impostor([&] {
    const int fd = accept(listener, nullptr, nullptr);
    const std::string greeting = store_wire::greeting(store_wire::random_nonce());
    send(fd, greeting.data(), greeting.size(), MSG_NOSIGNAL);
    char hello[store_wire::kHelloBytes];
    recv(fd, hello, sizeof hello, MSG_WAITALL);
    const std::string accept_any = "A" + std::string(store_wire::kMacBytes, '\0');
    send(fd, accept_any.data(), accept_any.size(), MSG_NOSIGNAL);
    read_until_closed(fd);
    close(fd);
  });
  const std::string error = error_of([&] { StoreClient client("127.0.0.1", port, kSecret, 5s); });
  impostor.join();
  close(listener);
  EXPECT_TRUE(
      contains(error, "did not prove this run's secret; another run or program holds the port"))
      << error;
}

TEST(Store, ClientNamesAStoreThatNeverCame) {
  int port = 0;
  {
    StoreServer gone("127.0.0.1", 0, kSecret);  // a port that was free a moment ago
    port = gone.port();
  }
  const std::string error =
      error_of([&] { StoreClient client("127.0.0.1", port, kSecret, 200ms); });
  EXPECT_TRUE(contains(error, "cannot reach the rendezvous store at 127.0.0.1:" +
                                  std::to_string(port) + " within 200 ms"))
      << error;
}

TEST(Store, ClientNamesAStoreThatWentAway) {
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0, kSecret);
  StoreClient client("127.0.0.1", server->port(), kSecret, 5s);
  server.reset();
  const std::string error = error_of([&] { client.set("k", "v"); });
  EXPECT_TRUE(contains(error, "rendezvous store at 127.0.0.1:")) << error;
}

TEST(Store, ServerOnLoopbackIsNotReachableFromOtherInterfaces) {
  std::string other;
  ifaddrs* interfaces = nullptr;
  ASSERT_EQ(getifaddrs(&interfaces), 0);
  for (ifaddrs* i = interfaces; i != nullptr && other.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const auto* ip = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
    if ((ntohl(ip->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &ip->sin_addr, text, sizeof text);
    other = text;
  }
  freeifaddrs(interfaces);
  if (other.empty()) GTEST_SKIP() << "this host has no IPv4 address but loopback";

  StoreServer loopback("127.0.0.1", 0, kSecret);
  const std::string error =
      error_of([&] { StoreClient client(other, loopback.port(), kSecret, 100ms); });
  EXPECT_TRUE(contains(error, "cannot reach the rendezvous store at " + other)) << error;

  StoreServer everywhere("0.0.0.0", 0, kSecret);
  StoreClient client(other, everywhere.port(), kSecret, 5s);
  client.set("k", "v");
  EXPECT_TRUE(client.check({"k"}));
}

TEST(Store, ServerNamesAnAddressThatIsNotThisHosts) {
  const std::string error = error_of([] { StoreServer server("192.0.2.1", 0, kSecret); });
  EXPECT_TRUE(contains(error, "cannot listen on 192.0.2.1:0")) << error;
  EXPECT_TRUE(contains(error, "is not an address of this host")) << error;
}

}  // namespace
}  // namespace mfsdp::executor
