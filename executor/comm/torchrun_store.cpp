// TorchrunStore: c10d's TCPStore wire protocol, as much of it as a rank needs to set a key and
// wait for one (torch/csrc/distributed/c10d/TCPStore*.cpp describe the server side).

#include "executor/comm/torchrun_store.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>

#include "executor/comm/store.h"
#include "executor/comm/store_connection.h"

namespace mfsdp::executor {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kValidationMagic = 0x3C85F7CE;
// Query types of the validated protocol; the legacy one numbers SET..GETNUMKEYS one lower.
constexpr uint8_t kValidate = 0;
constexpr uint8_t kSet = 1;
constexpr uint8_t kGet = 3;
constexpr uint8_t kWait = 6;
constexpr uint8_t kGetNumKeys = 7;
constexpr uint8_t kPing = 13;
constexpr uint8_t kStopWaiting = 0;
// The ping's nonce, chosen so that a legacy server, which takes the VALIDATE byte for SET and
// the next eight bytes (magic, PING, three nonce bytes) for the key's length, reads a length
// no vector can hold and drops the connection at once instead of waiting for more bytes.
constexpr uint32_t kPingNonce = 0x6DFFFFFF;
// A value longer than this is not an address: the store is not what it seems.
constexpr uint64_t kMaxValueBytes = 1 << 20;

template <typename T>
void append(std::string& bytes, T value) {
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));  // c10d sends integers in the host's byte order
  bytes.append(raw, sizeof(T));
}

void append_string(std::string& bytes, const std::string& text) {
  append<uint64_t>(bytes, text.size());
  bytes += text;
}

template <typename T>
T read_value(const std::string& raw) {
  T value{};
  std::memcpy(&value, raw.data(), sizeof(T));
  return value;
}

}  // namespace

const char* protocol_name(TorchrunStore::Protocol protocol) {
  return protocol == TorchrunStore::Protocol::kValidated ? "torch >= 2.1 (VALIDATE)"
                                                         : "torch <= 2.0 (no VALIDATE)";
}

TorchrunStore::TorchrunStore(const std::string& host, int port, std::chrono::milliseconds timeout)
    : host_(host),
      port_(port),
      where_(host + ":" + std::to_string(port)),
      timeout_(timeout),
      connection_(std::make_unique<StoreConnection>(
          "torchrun's store at " + host + ":" + std::to_string(port),
          "torchrun's agent has probably exited")) {
  open(Clock::now() + timeout);
}

TorchrunStore::~TorchrunStore() = default;

uint8_t TorchrunStore::query(uint8_t validated_code) const {
  return protocol_ == Protocol::kValidated ? validated_code
                                           : static_cast<uint8_t>(validated_code - 1);
}

void TorchrunStore::open(Clock::time_point deadline) {
  // Connect, retrying while the agent may still be starting its store.
  std::string last_error;
  for (std::chrono::milliseconds pause(10);; pause = std::min(pause * 2, decltype(pause)(500))) {
    try {
      connection_->connect(host_, port_);
      break;
    } catch (const StoreHangup& e) {
      last_error = e.what();
    }
    if (Clock::now() + pause >= deadline) {
      throw StoreError("cannot reach torchrun's store at " + where_ + " within " +
                       std::to_string(timeout_.count()) + " ms: " + last_error);
    }
    std::this_thread::sleep_for(pause);
  }

  // A validated server answers the ping with its nonce; a legacy one hangs up (see kPingNonce).
  std::string hello;
  append<uint8_t>(hello, kValidate);
  append<uint32_t>(hello, kValidationMagic);
  append<uint8_t>(hello, kPing);
  append<uint32_t>(hello, kPingNonce);
  try {
    connection_->send_all(hello, deadline, "VALIDATE and PING");
    const std::string echo = connection_->receive_exactly(4, deadline, "PING");
    if (read_value<uint32_t>(echo) != kPingNonce) {
      throw StoreError("the program at " + where_ +
                       " answered PING with another nonce; it is not torchrun's store");
    }
    protocol_ = Protocol::kValidated;
    return;
  } catch (const StoreHangup&) {
    // Legacy, or a validated server from before PING existed (it hangs up on unknown queries).
  }

  // Only a legacy server answers a query that does not follow VALIDATE: a validated one ignores
  // it or hangs up.
  connection_->connect(host_, port_);
  protocol_ = Protocol::kLegacy;
  std::string count_keys;
  append<uint8_t>(count_keys, query(kGetNumKeys));
  try {
    connection_->send_all(count_keys, deadline, "GETNUMKEYS");
    connection_->receive_exactly(8, deadline, "GETNUMKEYS");
    return;
  } catch (const StoreHangup&) {
  }
  connection_->connect(host_, port_);
  protocol_ = Protocol::kValidated;
  std::string validate;
  append<uint8_t>(validate, kValidate);
  append<uint32_t>(validate, kValidationMagic);
  connection_->send_all(validate, deadline, "VALIDATE");
}

void TorchrunStore::set(const std::string& key, const std::string& value) {
  std::string request;
  append<uint8_t>(request, query(kSet));
  append_string(request, key);
  append_string(request, value);
  connection_->send_all(request, Clock::now() + timeout_, "setting '" + key + "'");
}

std::string TorchrunStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  std::string wait;
  append<uint8_t>(wait, query(kWait));
  append<uint64_t>(wait, 1);
  append_string(wait, key);
  connection_->send_all(wait, deadline, "a wait for '" + key + "'");
  std::string answer;
  try {
    answer = connection_->receive_exactly(1, deadline, "a wait for '" + key + "'");
  } catch (const StoreHangup&) {
    throw;
  } catch (const StoreError&) {
    connection_->close();  // the wait is still pending on the server: this stream is spent
    throw StoreError("'" + key + "' was not set in torchrun's store at " + where_ + " within " +
                     std::to_string(timeout.count()) + " ms");
  }
  if (static_cast<uint8_t>(answer[0]) != kStopWaiting) {
    connection_->close();
    throw StoreError("torchrun's store at " + where_ + " answered a wait with " +
                     std::to_string(static_cast<uint8_t>(answer[0])) + ", not STOP_WAITING");
  }
  std::string request;
  append<uint8_t>(request, query(kGet));
  append_string(request, key);
  const Clock::time_point answer_by = Clock::now() + timeout_;
  connection_->send_all(request, answer_by, "the value of '" + key + "'");
  const uint64_t size = read_value<uint64_t>(
      connection_->receive_exactly(8, answer_by, "the value of '" + key + "'"));
  if (size > kMaxValueBytes) {
    connection_->close();
    throw StoreError("torchrun's store at " + where_ + " holds " + std::to_string(size) +
                     " bytes under '" + key + "', more than an address");
  }
  return connection_->receive_exactly(size, answer_by, "the value of '" + key + "'");
}

}  // namespace mfsdp::executor
