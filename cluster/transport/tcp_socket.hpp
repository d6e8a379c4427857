#pragma once
// The few POSIX socket steps the gates need (cluster/transport/tcp_gate.hpp). Plain C++.

#include <cstdint>
#include <string>

namespace actorlm {

// TCP_NODELAY: the gates relay small messages, each one latency-bound.
void set_socket_options(int fd);
// "host:port" of the socket's peer, numeric; "?" when unknown.
std::string peer_name(int fd);
// A nonblocking socket bound and listening on host:port (`listen`), or
// connecting to it (the connection may still be in progress). -1 and
// `error` on failure.
int open_socket(const std::string& host, uint16_t port, bool listen, std::string& error);

// Whether the peer of an accepted loopback connection is a socket of this
// very process (Linux: /proc/self/net/tcp and /proc/self/fd). A head's gate
// authenticates whoever it relays for, so it relays only for its own CAF.
bool peer_is_this_process(int fd);

}  // namespace actorlm
