#pragma once
// Which local address the transport should bind: the one the kernel routes towards the
// rendezvous host, so peers reach us over the same network as the store (127.0.0.1 when
// MASTER_ADDR is local).

#include <string>

namespace mfsdp::executor {

// The numeric local IP address of the route to `host`:`port` (host may be a name). Throws
// Error(kRuntime) when the host cannot be resolved or no route leads to it.
std::string outbound_address(const std::string& host, int port);

}  // namespace mfsdp::executor
