#pragma once
// The data plane's wire: frames of (header, payload) in one direction of a
// connected byte stream (data_link.hpp: a TCP socket or UCX), for bytes too many to pass through the actors'
// message path (KV rows between nodes). No CAF: the control plane (sealed
// FlatBuffers over the middleman) agrees on who talks to whom and hands both
// ends their keys; this moves the bytes.
//
// Each frame is
//   prefix   header length (u32), payload length (u64), little-endian
//   header   at most kMaxDataHeader bytes   + 16-byte tag
//   payload  at most the receiver's bound  + 16-byte tag
// Sealed (the default whenever the cluster has a secret or TLS): header and
// payload are each AES-256-GCM under the direction's key, the header's with
// the prefix as associated data, so the header is verified before the
// receiver acts on it and a payload is verified before its transfer may be
// committed. The nonce is the frame's sequence number (two per frame): the
// receiver counts too, so a frame replayed, reordered, dropped or sent back
// the other way fails its tag. On a trusted fabric (an operator's explicit
// opt-out, docs/SECURITY.md) the tags are XXH3-128 digests of the plain
// bytes: damage is caught, nothing is secret.
//
// The payload is gathered from and scattered to the caller's spans (pool
// rows) through one buffer of 1 MiB each end reuses, sealed or opened there in
// place: one copy between the rows and the link, one pass of the cipher.
// Sender and receiver may move to another link between frames (use()): the
// sequence numbers go on, so no nonce is used twice under a key.

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cluster/transport/data_link.hpp"

namespace actorlm {

enum class DataProtection : uint8_t { sealed, trusted_fabric };

inline constexpr uint32_t kMaxDataHeader = 4096;

using DataKey = std::array<uint8_t, 32>;

// The two directions' keys of one data connection, derived from the joined
// session's key and the connection's own nonces, so two connections of one
// session never share a key stream.
struct DataKeys {
  DataKey dialer_to_acceptor{}, acceptor_to_dialer{};
};
DataKeys derive_data_keys(const std::vector<uint8_t>& session_key, const std::vector<uint8_t>& dialer_nonce,
                          const std::vector<uint8_t>& acceptor_nonce);

class DataSender {
 public:
  // `link` (or the socket `fd`) stays the caller's (never closed here).
  DataSender(DataLink& link, DataProtection protection, const DataKey& key);
  DataSender(int fd, DataProtection protection, const DataKey& key);
  ~DataSender();
  DataSender(const DataSender&) = delete;
  DataSender& operator=(const DataSender&) = delete;

  // One frame: `header`, then the payload gathered from `pieces` in order.
  // Throws DataChannelError.
  void send(std::span<const uint8_t> header, std::span<const std::span<const uint8_t>> pieces);
  // Tests: flip one byte of the next frame's payload after it is sealed, as
  // a damaged link would.
  void damage_next_payload() { damage_next_ = true; }
  // The next frames go over `link` (the caller's, outliving this sender).
  void use(DataLink& link) { link_ = &link; }

 private:
  bool damage_next_ = false;
  std::unique_ptr<SocketLink> own_;  // the fd constructor's
  DataLink* link_;
  DataProtection protection_;
  DataKey key_;
  uint64_t seq_ = 0;
  void* ctx_ = nullptr;  // EVP_CIPHER_CTX, reused
  std::vector<uint8_t> buffer_;
};

class DataReceiver {
 public:
  // Frames whose payload is over max_payload are refused before any of it
  // is read.
  DataReceiver(DataLink& link, DataProtection protection, const DataKey& key, uint64_t max_payload);
  DataReceiver(int fd, DataProtection protection, const DataKey& key, uint64_t max_payload);
  ~DataReceiver();
  DataReceiver(const DataReceiver&) = delete;
  DataReceiver& operator=(const DataReceiver&) = delete;

  // Reads the next frame's header (verified). False when the peer closed
  // the connection cleanly between frames; throws DataChannelError else.
  bool next(std::vector<uint8_t>& header, uint64_t& payload_bytes);
  // Then the payload, scattered over `into` (whose sizes sum to
  // payload_bytes), verified at its end: a throw means what was written
  // there is garbage.
  void read_payload(std::span<const std::span<uint8_t>> into);
  // Or, when the header names nothing the receiver will take: reads and
  // verifies the payload, keeping none of it.
  void skip_payload();
  // The next frames come over `link` (the caller's, outliving this receiver).
  void use(DataLink& link) { link_ = &link; }

 private:
  std::unique_ptr<SocketLink> own_;
  DataLink* link_;
  DataProtection protection_;
  DataKey key_;
  uint64_t max_payload_;
  uint64_t seq_ = 0;
  uint64_t pending_ = 0;  // payload bytes of the frame whose header was read
  bool in_frame_ = false;
  void* ctx_ = nullptr;
  std::vector<uint8_t> buffer_;
};

}  // namespace actorlm
