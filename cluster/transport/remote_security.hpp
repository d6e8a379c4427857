#pragma once
// Who a node may talk to and how it proves who it is: addresses, the TLS
// files and the shared secret. Plain data, checked here; the CAF side lives in
// cluster/transport/remote_setup.hpp.

#include <cstdint>
#include <string>

namespace actorlm {

// Mutual TLS (CAF's OpenSSL module) when certificate, key and CA are all
// set: each side presents a certificate signed by the CA and refuses a peer
// that does not. `secret` is a shared secret both sides must know; the node
// checks it with a challenge-response (HMAC-SHA256 over a fresh nonce), so it
// never crosses the network. Plain TCP is only allowed on loopback unless
// allow_plain_remote says otherwise.
struct RemoteSecurity {
  std::string tls_cert, tls_key, tls_ca;  // PEM files
  std::string secret;
  bool allow_plain_remote = false;
  // With a secret and no TLS, the gates refuse a connection whose peer
  // announces a CAF (BASP) message above this: the largest FlatBuffers
  // message (msg::max_message_bytes, 64 MiB) plus room for CAF's framing.
  uint64_t max_message_bytes = 65ull << 20;

  bool tls() const { return !tls_cert.empty() || !tls_key.empty() || !tls_ca.empty(); }
  // Empty when usable, else what is missing or wrong ("TLS needs ...").
  std::string check(const std::string& host) const;
};

// Reads a secret file (its bytes, one trailing newline dropped). Throws
// std::runtime_error when the file is missing, empty or over 4 KiB.
std::string read_secret_file(const std::string& path);

struct NodeAddress {
  std::string host;
  uint16_t port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};

// "host:port" (port 1..65535; "[::1]:7000" for IPv6). Throws
// std::invalid_argument naming the text.
NodeAddress parse_node_address(const std::string& text);

}  // namespace actorlm
