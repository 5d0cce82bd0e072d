#pragma once
// The rendezvous store's wire format, shared by its server and its client.
//
// Handshake (mutual proof of the run's secret, before any key is read or written):
//   server -> client  greeting: magic, version, server nonce
//   client -> server  hello:    magic, version, client nonce, HMAC(secret, "client" + nonces)
//   server -> client  'A' + HMAC(secret, "server" + nonces), or 'R' and the server hangs up
// Then the client sends requests and the server answers each, one at a time, as frames:
//   u32 length (big-endian) of what follows, u8 tag, u32 count, count x (u32 length, bytes).

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

struct addrinfo;

namespace mfsdp::executor::store_wire {

constexpr char kMagic[8] = {'M', 'F', 'S', 'D', 'P', 'R', 'D', 'Z'};
constexpr uint8_t kVersion = 1;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;  // HMAC-SHA256
constexpr size_t kGreetingBytes = sizeof kMagic + 1 + kNonceBytes;
constexpr size_t kHelloBytes = sizeof kMagic + 1 + kNonceBytes + kMacBytes;
constexpr uint8_t kAccepted = 'A';
constexpr uint8_t kRefused = 'R';
// Frames larger than this are refused: the rendezvous exchanges addresses and small ids.
constexpr uint32_t kMaxFrameBytes = 64u << 20;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// Requests. Wait and Get carry the wait in milliseconds, as decimal text, as their first field.
enum class Op : uint8_t { kSet = 1, kGet = 2, kWait = 3, kCheck = 4 };
// Answers. kTimeout: the keys were not all set within the request's wait.
enum class Status : uint8_t { kOk = 'O', kTimeout = 'T', kError = 'E' };

struct Frame {
  uint8_t tag = 0;
  std::vector<std::string> fields;
};

class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Nonce random_nonce();
// HMAC-SHA256 over `role` and both nonces: a proof of the secret that cannot be replayed on
// another connection, since each side brings a fresh nonce.
Mac proof(const std::string& secret, const char* role, const Nonce& server_nonce,
          const Nonce& client_nonce);
bool same_proof(const uint8_t* a, const uint8_t* b);  // in constant time

std::string greeting(const Nonce& server_nonce);
std::string hello(const std::string& secret, const Nonce& server_nonce, const Nonce& client_nonce);
// The server's answer to a hello that proved the secret: kAccepted and its own proof.
std::string acceptance(const std::string& secret, const Nonce& server_nonce,
                       const Nonce& client_nonce);

// What the client makes of the first kGreetingBytes of `bytes` (fewer: kNotAStore).
struct GreetingCheck {
  enum Verdict { kStore, kNotAStore, kOtherVersion } verdict = kNotAStore;
  Nonce server_nonce{};  // when kStore
};
GreetingCheck check_greeting(const std::string& bytes);

// What the server makes of a stranger's first kHelloBytes of `bytes` (fewer: kNotARank).
struct HelloCheck {
  enum Verdict { kProved, kNotARank, kWrongSecret } verdict = kNotARank;
  Nonce client_nonce{};  // when kProved
};
HelloCheck check_hello(const std::string& bytes, const std::string& secret,
                       const Nonce& server_nonce);

std::string encode(uint8_t tag, const std::vector<std::string>& fields);
// Decodes the bytes after the length prefix; throws WireError on a malformed frame.
Frame decode(const std::string& payload);
// The length prefix at `bytes` (4 bytes, big-endian).
uint32_t frame_length(const char* bytes);
// Takes the first whole frame off the front of `stream`, what a peer has sent so far: nullopt
// while it is incomplete. Throws WireError, leaving `stream` as it was, when the frame is
// malformed or its length prefix exceeds kMaxFrameBytes (as soon as the prefix is in, so that
// a peer cannot make the reader hold more); `what` names it there ("a request").
std::optional<Frame> take_frame(std::string& stream, const std::string& what);

// The TCP addresses of `host:port`, to listen on (`passive`) or connect to. Throws StoreError
// when the host cannot be resolved.
using Addresses = std::unique_ptr<addrinfo, void (*)(addrinfo*)>;
Addresses resolve(const std::string& host, int port, bool passive);

}  // namespace mfsdp::executor::store_wire
