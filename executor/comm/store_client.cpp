// StoreClient: one blocking connection, one request at a time (a mutex keeps threads apart),
// every read and write held to a deadline so that a silent store fails instead of hanging.

#include <algorithm>
#include <mutex>
#include <thread>
#include <utility>

#include "executor/comm/store.h"
#include "executor/comm/store_connection.h"
#include "executor/comm/store_wire.h"

namespace mfsdp::executor {
namespace {

namespace wire = store_wire;
using Clock = std::chrono::steady_clock;

// An answer to a wait may arrive this much after the wait itself ran out.
constexpr std::chrono::seconds kAnswerMargin(10);

std::string milliseconds_text(std::chrono::milliseconds ms) {
  return std::to_string(std::max<long long>(ms.count(), 0));
}

}  // namespace

struct StoreClient::Impl {
  std::string host;
  int port = 0;
  std::string where;
  std::string secret;
  std::chrono::milliseconds timeout;
  std::unique_ptr<StoreConnection> connection;
  std::mutex mutex;

  void drop() { connection->close(); }

  std::string receive_exactly(size_t count, Clock::time_point deadline, const std::string& what) {
    return connection->receive_exactly(count, deadline, what);
  }
  void send_all(const std::string& bytes, Clock::time_point deadline, const std::string& what) {
    connection->send_all(bytes, deadline, what);
  }

  // One attempt: connect and authenticate. StoreHangup when nothing (or nothing yet) listens.
  void connect_once(Clock::time_point deadline) {
    connection->connect(host, port);
    const wire::GreetingCheck greeting =
        wire::check_greeting(receive_exactly(wire::kGreetingBytes, deadline, "its greeting"));
    if (greeting.verdict == wire::GreetingCheck::kNotAStore) {
      throw StoreError("the program listening at " + where +
                       " is not an mfsdp rendezvous store; another program holds the port");
    }
    if (greeting.verdict == wire::GreetingCheck::kOtherVersion) {
      throw StoreError("the rendezvous store at " + where +
                       " speaks another protocol version; run the same mfsdp on every rank");
    }
    const wire::Nonce& server_nonce = greeting.server_nonce;
    const wire::Nonce client_nonce = wire::random_nonce();
    send_all(wire::hello(secret, server_nonce, client_nonce), deadline, "the handshake");
    // A store that refuses the secret says so before it hangs up; one that hangs up without a
    // word dropped the connection to make room for newer ones (a flood of strangers), so this
    // rank tries again like one that found nothing listening.
    const std::string verdict = receive_exactly(1, deadline, "the handshake");
    if (static_cast<uint8_t>(verdict[0]) != wire::kAccepted) {
      throw StoreError("the rendezvous store at " + where +
                       " refused this rank's secret: start every rank with the same "
                       "MFSDP_RDZV_SECRET, or the port belongs to another run");
    }
    const std::string mac = receive_exactly(wire::kMacBytes, deadline, "the handshake");
    const wire::Mac expected = wire::proof(secret, "server", server_nonce, client_nonce);
    if (!wire::same_proof(expected.data(), reinterpret_cast<const uint8_t*>(mac.data()))) {
      throw StoreError("the rendezvous store at " + where +
                       " did not prove this run's secret; another run or program holds the port");
    }
  }

  void connect_until(Clock::time_point deadline) {
    std::string last_error;
    for (std::chrono::milliseconds pause(10);; pause = std::min(pause * 2, decltype(pause)(500))) {
      try {
        connect_once(deadline);
        return;
      } catch (const StoreHangup& e) {
        last_error = e.what();  // nothing listens yet, or the store went away mid-handshake
      } catch (const StoreError&) {
        drop();
        throw;
      }
      drop();
      if (Clock::now() + pause >= deadline) {
        throw StoreError("cannot reach the rendezvous store at " + where + " within " +
                         std::to_string(timeout.count()) + " ms: " + last_error);
      }
      std::this_thread::sleep_for(pause);  // the host may still be starting: retry, backing off
    }
  }

  wire::Frame request(wire::Op op, const std::vector<std::string>& fields,
                      Clock::time_point deadline, const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!connection->is_open())
      throw StoreError("the connection to the rendezvous store at " + where + " is closed");
    try {
      send_all(wire::encode(static_cast<uint8_t>(op), fields), deadline, what);
      const std::string prefix = receive_exactly(4, deadline, what);
      const uint32_t length = wire::frame_length(prefix.data());
      if (length > wire::kMaxFrameBytes) throw wire::WireError("an answer larger than the limit");
      wire::Frame answer = wire::decode(receive_exactly(length, deadline, what));
      if (answer.tag == static_cast<uint8_t>(wire::Status::kError)) {
        throw StoreError(
            "the rendezvous store at " + where + " rejected " + what + ": " +
            (answer.fields.empty() ? std::string("no reason given") : answer.fields[0]));
      }
      return answer;
    } catch (const wire::WireError& e) {
      drop();
      throw StoreError("the rendezvous store at " + where + " sent a malformed answer to " + what +
                       ": " + e.what());
    } catch (const StoreError&) {
      drop();  // the stream may be out of step; no later request may use it
      throw;
    }
  }
};

StoreClient::StoreClient(const std::string& host, int port, std::string secret,
                         std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = host;
  impl_->port = port;
  impl_->where = host + ":" + std::to_string(port);
  impl_->connection =
      std::make_unique<StoreConnection>("the rendezvous store at " + impl_->where,
                                        "its host, rank 0 or the launcher, has probably exited");
  impl_->secret = std::move(secret);
  impl_->timeout = timeout;
  impl_->connect_until(Clock::now() + timeout);
}

StoreClient::~StoreClient() = default;

const std::string& StoreClient::address() const {
  return impl_->where;
}

void StoreClient::set(const std::string& key, const std::string& value) {
  impl_->request(wire::Op::kSet, {key, value}, Clock::now() + impl_->timeout,
                 "setting '" + key + "'");
}

std::string StoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  const std::string what = "the value of '" + key + "'";
  wire::Frame answer = impl_->request(wire::Op::kGet, {milliseconds_text(timeout), key},
                                      Clock::now() + timeout + kAnswerMargin, what);
  if (answer.tag == static_cast<uint8_t>(wire::Status::kTimeout)) {
    throw StoreError("'" + key + "' was not set in the rendezvous store at " + impl_->where +
                     " within " + std::to_string(timeout.count()) + " ms");
  }
  if (answer.fields.size() != 1)
    throw StoreError("the store at " + impl_->where + " answered " + what + " with no value");
  return std::move(answer.fields[0]);
}

bool StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> fields = {milliseconds_text(timeout)};
  fields.insert(fields.end(), keys.begin(), keys.end());
  const wire::Frame answer =
      impl_->request(wire::Op::kWait, fields, Clock::now() + timeout + kAnswerMargin, "a wait");
  return answer.tag == static_cast<uint8_t>(wire::Status::kOk);
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  const wire::Frame answer =
      impl_->request(wire::Op::kCheck, keys, Clock::now() + impl_->timeout, "a check");
  return answer.fields.size() == 1 && answer.fields[0] == "1";
}

}  // namespace mfsdp::executor
