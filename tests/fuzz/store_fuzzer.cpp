// Bytes from a peer of the rendezvous store, through what the store's server and client make
// of them (executor/comm/store_wire.h): a stranger's hello, then, once the secret is proved,
// requests as frames arriving a few bytes at a time; and a greeting and an answer frame as the
// client reads them from whatever listens at the port.
//
// Input: one control byte, then the peer's bytes. The control byte's low bit: 0, the peer is a
// stranger and its bytes start with its hello, which must not prove the secret; 1, the peer
// knows the secret: the harness writes its hello from the first 32 bytes (the client nonce),
// which must be accepted, and the rest are its requests. The other 7 bits + 1: how many bytes
// arrive at once.
//
// A frame taken off the stream must encode back to exactly the bytes it took; a WireError is
// the expected answer to a malformed or oversized one; anything else is a finding.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "executor/comm/store_wire.h"
#include "tests/fuzz/harness.h"

namespace mfsdp::fuzz {
namespace {

namespace wire = executor::store_wire;

const std::string kSecret = "fuzz-secret-0123456789abcdef0123456789abcdef";

wire::Nonce fixed_nonce(uint8_t fill) {
  wire::Nonce nonce{};
  nonce.fill(fill);
  return nonce;
}

// The server's side: requests arrive `chunk` bytes at a time; each whole frame is taken off.
void serve_requests(const std::string& bytes, size_t chunk) {
  std::string stream;
  size_t consumed = 0;  // `stream` is bytes[consumed, at)
  for (size_t at = 0; at < bytes.size();) {
    const size_t n = std::min(chunk, bytes.size() - at);
    stream.append(bytes, at, n);
    at += n;
    for (;;) {
      const size_t before = stream.size();
      std::optional<wire::Frame> frame;
      try {
        frame = wire::take_frame(stream, "a request");
      } catch (const wire::WireError&) {
        if (stream.size() != before) finding("take_frame threw but consumed bytes");
        return;  // the server answers with the error and hangs up
      }
      if (!frame) {
        if (stream.size() != before) finding("take_frame took no frame but consumed bytes");
        break;
      }
      const size_t taken = before - stream.size();
      if (wire::encode(frame->tag, frame->fields) != bytes.substr(consumed, taken)) {
        finding("a frame does not encode back to the bytes it was taken from");
      }
      consumed += taken;
    }
  }
}

void check_as_client(const std::string& bytes) {
  const wire::GreetingCheck greeting = wire::check_greeting(bytes);
  if (greeting.verdict == wire::GreetingCheck::kStore &&
      std::memcmp(greeting.server_nonce.data(), bytes.data() + sizeof wire::kMagic + 1,
                  wire::kNonceBytes) != 0) {
    finding("check_greeting returned another nonce than the greeting's");
  }
  try {
    const wire::Frame answer = wire::decode(bytes);
    std::string prefixed = wire::encode(answer.tag, answer.fields);
    if (prefixed.substr(4) != bytes) finding("a decoded answer does not encode back to itself");
  } catch (const wire::WireError&) {
  }
}

}  // namespace
}  // namespace mfsdp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mfsdp;
  namespace wire = executor::store_wire;
  if (size == 0) return 0;
  const bool knows_secret = (data[0] & 1) != 0;
  const size_t chunk = (data[0] >> 1) + 1;
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  fuzz::expect_only_errors([&] {
    fuzz::check_as_client(bytes);
    const wire::Nonce server_nonce = fuzz::fixed_nonce(0x5a);
    if (!knows_secret) {
      const wire::HelloCheck hello = wire::check_hello(bytes, fuzz::kSecret, server_nonce);
      if (hello.verdict == wire::HelloCheck::kProved) {
        fuzz::finding("a stranger's hello proved the secret without knowing it");
      }
      return;
    }
    wire::Nonce client_nonce{};
    std::memcpy(client_nonce.data(), bytes.data(), std::min(bytes.size(), client_nonce.size()));
    const std::string hello = wire::hello(fuzz::kSecret, server_nonce, client_nonce);
    const wire::HelloCheck check = wire::check_hello(hello, fuzz::kSecret, server_nonce);
    if (check.verdict != wire::HelloCheck::kProved || check.client_nonce != client_nonce) {
      fuzz::finding("the hello of a rank that knows the secret is not accepted");
    }
    fuzz::serve_requests(bytes.substr(std::min(bytes.size(), client_nonce.size())), chunk);
  });
  return 0;
}
