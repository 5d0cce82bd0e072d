#include "executor/comm/store_wire.h"

#include <netdb.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>

#include "executor/comm/store.h"

namespace mfsdp::executor::store_wire {
namespace {

void append_u32(std::string& out, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(value >> shift));
}

}  // namespace

uint32_t frame_length(const char* bytes) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value = (value << 8) | static_cast<uint8_t>(bytes[i]);
  return value;
}

Nonce random_nonce() {
  Nonce nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    throw WireError("the system's random number generator failed");
  }
  return nonce;
}

Mac proof(const std::string& secret, const char* role, const Nonce& server_nonce,
          const Nonce& client_nonce) {
  std::string message(role);
  message.append(reinterpret_cast<const char*>(server_nonce.data()), server_nonce.size());
  message.append(reinterpret_cast<const char*>(client_nonce.data()), client_nonce.size());
  Mac mac{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac.data(),
           &length) == nullptr ||
      length != mac.size()) {
    throw WireError("HMAC-SHA256 failed");
  }
  return mac;
}

bool same_proof(const uint8_t* a, const uint8_t* b) {
  return CRYPTO_memcmp(a, b, kMacBytes) == 0;
}

std::string greeting(const Nonce& server_nonce) {
  std::string out(kMagic, sizeof kMagic);
  out.push_back(static_cast<char>(kVersion));
  out.append(reinterpret_cast<const char*>(server_nonce.data()), server_nonce.size());
  return out;
}

std::string hello(const std::string& secret, const Nonce& server_nonce, const Nonce& client_nonce) {
  std::string out(kMagic, sizeof kMagic);
  out.push_back(static_cast<char>(kVersion));
  out.append(reinterpret_cast<const char*>(client_nonce.data()), client_nonce.size());
  const Mac mac = proof(secret, "client", server_nonce, client_nonce);
  out.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  return out;
}

std::string acceptance(const std::string& secret, const Nonce& server_nonce,
                       const Nonce& client_nonce) {
  const Mac mac = proof(secret, "server", server_nonce, client_nonce);
  std::string out(1, static_cast<char>(kAccepted));
  out.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  return out;
}

GreetingCheck check_greeting(const std::string& bytes) {
  GreetingCheck check;
  if (bytes.size() < kGreetingBytes || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return check;
  }
  if (static_cast<uint8_t>(bytes[sizeof kMagic]) != kVersion) {
    check.verdict = GreetingCheck::kOtherVersion;
    return check;
  }
  std::memcpy(check.server_nonce.data(), bytes.data() + sizeof kMagic + 1,
              check.server_nonce.size());
  check.verdict = GreetingCheck::kStore;
  return check;
}

HelloCheck check_hello(const std::string& bytes, const std::string& secret,
                       const Nonce& server_nonce) {
  HelloCheck check;
  if (bytes.size() < kHelloBytes || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0 ||
      static_cast<uint8_t>(bytes[sizeof kMagic]) != kVersion) {
    return check;
  }
  Nonce client_nonce{};
  std::memcpy(client_nonce.data(), bytes.data() + sizeof kMagic + 1, client_nonce.size());
  const Mac expected = proof(secret, "client", server_nonce, client_nonce);
  const auto* offered =
      reinterpret_cast<const uint8_t*>(bytes.data() + sizeof kMagic + 1 + kNonceBytes);
  if (!same_proof(expected.data(), offered)) {
    check.verdict = HelloCheck::kWrongSecret;
    return check;
  }
  check.verdict = HelloCheck::kProved;
  check.client_nonce = client_nonce;
  return check;
}

std::string encode(uint8_t tag, const std::vector<std::string>& fields) {
  std::string body;
  body.push_back(static_cast<char>(tag));
  append_u32(body, static_cast<uint32_t>(fields.size()));
  for (const std::string& field : fields) {
    append_u32(body, static_cast<uint32_t>(field.size()));
    body += field;
  }
  if (body.size() > kMaxFrameBytes) {
    throw WireError("a rendezvous message of " + std::to_string(body.size()) +
                    " bytes exceeds the store's limit of " + std::to_string(kMaxFrameBytes));
  }
  std::string out;
  append_u32(out, static_cast<uint32_t>(body.size()));
  return out + body;
}

Addresses resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    throw StoreError("cannot resolve the rendezvous address '" + host + "': " + gai_strerror(rc));
  }
  return Addresses(found, &freeaddrinfo);
}

Frame decode(const std::string& payload) {
  if (payload.size() < 5) throw WireError("a frame shorter than its header");
  Frame frame;
  frame.tag = static_cast<uint8_t>(payload[0]);
  const uint32_t count = frame_length(payload.data() + 1);
  size_t at = 5;
  // Every field takes at least its 4-byte length, which bounds `count` by the payload.
  if (count > (payload.size() - at) / 4) throw WireError("a frame with too many fields");
  frame.fields.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (payload.size() - at < 4) throw WireError("a frame cut short");
    const uint32_t length = frame_length(payload.data() + at);
    at += 4;
    if (length > payload.size() - at) throw WireError("a field longer than its frame");
    frame.fields.emplace_back(payload, at, length);
    at += length;
  }
  if (at != payload.size()) throw WireError("bytes after a frame's last field");
  return frame;
}

std::optional<Frame> take_frame(std::string& stream, const std::string& what) {
  if (stream.size() < 4) return std::nullopt;
  const uint32_t length = frame_length(stream.data());
  if (length > kMaxFrameBytes) throw WireError(what + " larger than the store's limit");
  if (stream.size() - 4 < length) return std::nullopt;
  Frame frame = decode(stream.substr(4, length));
  stream.erase(0, 4 + static_cast<size_t>(length));
  return frame;
}

}  // namespace mfsdp::executor::store_wire
