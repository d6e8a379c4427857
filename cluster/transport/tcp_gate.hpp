#pragma once
// A gate in front of CAF's middleman: a TCP relay that authenticates every
// connection before a single byte of it reaches CAF (or leaves for the peer).
//
// Why: the middleman parses whatever a TCP peer sends (BASP) before any actor
// can check who it is. A 32-byte frame header announcing a 4 GiB payload made
// a node allocate it, and bytes recorded from a joined head could be replayed
// on a new connection. With a shared secret, a node's public port is a gate
// (GateSide::acceptor) and its middleman listens on an ephemeral loopback
// port behind it; a head dials each node through its own local gate
// (GateSide::dialer). Both gates run a mutual challenge-response on fresh
// nonces from both sides, in small fixed-size messages:
//
//   dialer   -> acceptor  "ALMGATE1" + dialer nonce (32)             40 bytes
//   acceptor -> dialer    "ALMGATE1" + acceptor nonce (32)           40 bytes
//   dialer   -> acceptor  gate_proof(dialer, both nonces)            32 bytes
//   acceptor -> dialer    status (0 accepted, 1 wrong secret)
//                         + gate_proof(acceptor, both nonces)        33 bytes
//
// then relays both ways. Until then an acceptor reads at most 72 bytes per
// connection into a fixed buffer, gives each connection handshake_timeout,
// and holds at most max_unauthenticated such connections (more are closed on
// accept). After it, when max_frame_payload is set, it reads the BASP frame
// headers the remote side sends (cluster/transport/basp_frame_meter.hpp) and closes the
// connection on a frame above the bound. Relay buffers are 64 KiB each way.
//
// Plain C++ (POSIX sockets, one poll thread per gate, OpenSSL for the MACs):
// no CAF here.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "cluster/transport/cluster_handshake.hpp"

namespace actorlm {

struct GateConfig {
  // acceptor: a node's public port, relaying to its loopback middleman.
  // dialer: a head's loopback port for one node, relaying to that node's gate.
  GateSide side = GateSide::acceptor;
  std::string secret;  // must not be empty
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;  // 0: any free port (see TcpGate::port)
  std::string target_host;
  uint16_t target_port = 0;
  // Largest BASP payload the remote side may announce; 0: frames are not
  // read (under TLS they are encrypted, and OpenSSL bounds its own records).
  uint64_t max_frame_payload = 0;
  std::chrono::milliseconds handshake_timeout{5000};
  size_t max_unauthenticated = 64;
  std::string label = "gate";  // names this gate in logs
};

class TcpGate {
 public:
  // Binds and starts the relay thread. Throws std::invalid_argument (no
  // secret) or std::runtime_error (cannot listen).
  explicit TcpGate(GateConfig config);
  ~TcpGate();  // stops the thread and closes every connection
  TcpGate(const TcpGate&) = delete;
  TcpGate& operator=(const TcpGate&) = delete;

  uint16_t port() const;
  // A dialer's last handshake failure ("the shared secret does not match",
  // unreachable, ...), cleared by a success; empty when none. Thread-safe.
  std::string last_failure() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorlm
