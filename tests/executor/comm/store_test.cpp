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
#include "tests/executor/comm/stranger_flood.h"

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

// Waits (up to 20 s) until `done` holds; false if it never did.
bool eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(10ms);
  return done();
}

// Several hundred strangers that say nothing, or trickle a hello, keep every stranger's place
// taken and take each one again as soon as the store drops it. The ranks still get in: a new
// connection takes the oldest stranger's place, and a rank proves the secret long before as
// many newer connections have come.
TEST(Store, AFloodOfSilentAndSlowStrangersDoesNotKeepTheRanksOut) {
  StoreLimits limits;
  limits.max_strangers = 32;
  StoreServer server("127.0.0.1", 0, kSecret, limits);
  StoreClient before("127.0.0.1", server.port(), kSecret, 5s);
  testing::StrangerFlood flood(server.port(), 300, 50);
  ASSERT_TRUE(eventually([&] { return flood.dropped() >= 300; }))
      << "the flood never filled the store: " << flood.connected() << " connected";
  StoreClient during("127.0.0.1", server.port(), kSecret, 5s);
  during.set("k", "v");
  EXPECT_EQ(before.get("k", 1s), "v");
  before.set("k2", "w");
  EXPECT_EQ(during.get("k2", 1s), "w");
  EXPECT_LE(server.max_strangers_held(), 32u);
  EXPECT_GE(server.refused(), 300);
}

// Strangers from one address push out only each other: a connection from another address,
// here one still to send its hello, keeps its place however many come, and proves the secret.
TEST(Store, StrangersFromOneAddressPushOutOnlyEachOther) {
  StoreLimits limits;
  limits.max_strangers = 8;
  StoreServer server("127.0.0.1", 0, kSecret, limits);
  const int other = testing::StrangerFlood::connect_from(server.port(), "127.0.0.2");
  if (other < 0) GTEST_SKIP() << "this host cannot connect from 127.0.0.2";
  close(other);
  const int rank = raw_connection(server.port());  // from 127.0.0.1
  ASSERT_GE(rank, 0);
  std::string greeting(store_wire::kGreetingBytes, '\0');
  ASSERT_EQ(recv(rank, greeting.data(), greeting.size(), MSG_WAITALL),
            static_cast<ssize_t>(greeting.size()));
  testing::StrangerFlood flood(server.port(), 40, 0, "127.0.0.2");
  ASSERT_TRUE(eventually([&] { return flood.dropped() >= 100; }));
  const store_wire::GreetingCheck check = store_wire::check_greeting(greeting);
  ASSERT_EQ(check.verdict, store_wire::GreetingCheck::kStore);
  const std::string hello =
      store_wire::hello(kSecret, check.server_nonce, store_wire::random_nonce());
  ASSERT_EQ(send(rank, hello.data(), hello.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(hello.size()));
  char verdict = 0;
  ASSERT_EQ(recv(rank, &verdict, 1, MSG_WAITALL), 1) << "the store dropped the other address";
  EXPECT_EQ(static_cast<uint8_t>(verdict), store_wire::kAccepted);
  close(rank);
}

TEST(Store, RefusesSetsBeyondItsKeyAndByteLimits) {
  StoreLimits limits;
  limits.max_keys = 3;
  limits.max_stored_bytes = 100;
  StoreServer server("127.0.0.1", 0, kSecret, limits);
  StoreClient client("127.0.0.1", server.port(), kSecret, 5s);
  client.set("a", "1");
  client.set("b", "2");
  client.set("c", "3");
  client.set("a", "overwriting a key adds none");
  // A rejected request ends its connection (its stream may be out of step): a new one each.
  std::string error =
      error_of([&] { StoreClient("127.0.0.1", server.port(), kSecret, 5s).set("d", "4"); });
  EXPECT_TRUE(
      contains(error, "rejected setting 'd': the store is full: it holds 3 keys, its limit"))
      << error;
  error = error_of(
      [&] { StoreClient("127.0.0.1", server.port(), kSecret, 5s).set("b", std::string(80, 'x')); });
  EXPECT_TRUE(contains(error,
                       "the store is full: it would hold 111 bytes of keys and values, "
                       "over its limit of 100"))
      << error;
  StoreClient reader("127.0.0.1", server.port(), kSecret, 5s);
  EXPECT_EQ(reader.get("a", 1s), "overwriting a key adds none");
  EXPECT_EQ(reader.get("b", 1s), "2");
  EXPECT_FALSE(reader.check({"d"}));
}

// A rank that sends requests and never reads the answers: the store stops reading its
// requests once it holds max_unsent_bytes for it, and serves the rest once it reads again.
TEST(Store, StopsReadingARankThatLeavesItsAnswersUnread) {
  StoreLimits limits;
  limits.max_unsent_bytes = size_t{1} << 20;
  StoreServer server("127.0.0.1", 0, kSecret, limits);
  const std::string value(256 << 10, 'v');
  StoreClient("127.0.0.1", server.port(), kSecret, 5s).set("big", value);

  const int fd = raw_connection(server.port());
  ASSERT_GE(fd, 0);
  std::string greeting(store_wire::kGreetingBytes, '\0');
  ASSERT_EQ(recv(fd, greeting.data(), greeting.size(), MSG_WAITALL),
            static_cast<ssize_t>(greeting.size()));
  const store_wire::Nonce server_nonce = store_wire::check_greeting(greeting).server_nonce;
  const std::string hello = store_wire::hello(kSecret, server_nonce, store_wire::random_nonce());
  ASSERT_EQ(send(fd, hello.data(), hello.size(), MSG_NOSIGNAL), static_cast<ssize_t>(hello.size()));
  std::string accepted(1 + store_wire::kMacBytes, '\0');
  ASSERT_EQ(recv(fd, accepted.data(), accepted.size(), MSG_WAITALL),
            static_cast<ssize_t>(accepted.size()));
  ASSERT_EQ(static_cast<uint8_t>(accepted[0]), store_wire::kAccepted);

  constexpr int kGets = 200;  // 50 MiB of answers, a few KiB of requests
  std::string requests;
  for (int i = 0; i < kGets; ++i) {
    requests += store_wire::encode(static_cast<uint8_t>(store_wire::Op::kGet), {"0", "big"});
  }
  ASSERT_EQ(send(fd, requests.data(), requests.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(requests.size()));
  // Every answer comes, in order, as the rank reads; the store never held more than its limit
  // (and one answer) unsent.
  for (int i = 0; i < kGets; ++i) {
    std::string prefix(4, '\0');
    ASSERT_EQ(recv(fd, prefix.data(), 4, MSG_WAITALL), 4) << "answer " << i;
    std::string payload(store_wire::frame_length(prefix.data()), '\0');
    ASSERT_EQ(recv(fd, payload.data(), payload.size(), MSG_WAITALL),
              static_cast<ssize_t>(payload.size()));
    const store_wire::Frame answer = store_wire::decode(payload);
    ASSERT_EQ(answer.tag, static_cast<uint8_t>(store_wire::Status::kOk));
    ASSERT_EQ(answer.fields.size(), 1u);
    ASSERT_EQ(answer.fields[0], value);
  }
  close(fd);
  EXPECT_GT(server.max_unsent_held(), 0u);
  EXPECT_LE(server.max_unsent_held(), limits.max_unsent_bytes + value.size() + 64);
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
