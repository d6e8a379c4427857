#pragma once
// One joined head's requests to one node, bound to the join that admitted
// them. The head seals every request (generate, abort, stop, stats, flush,
// forward) with the session key both sides derived from the join's two
// nonces and a sequence number; the node opens it with the same key and takes
// each sequence number once, in increasing order. So bytes recorded from a
// head and replayed (on another connection, or claiming the head's CAF
// identity) carry an old number or a MAC under a key the replayer never had,
// and are dropped: the CAF sender of a message is a claim, the seal is proof.
//
// Wire form of a sealed request:
//   offset  size  field
//   0       8     sequence number, little-endian, from 1
//   8       32    HMAC-SHA256(key, "actorlm-request" + kind + sequence + payload)
//   40      n     payload: the sealed FlatBuffers message (messages/envelope.hpp)
//
// Not thread-safe: one actor owns each side.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace actorlm {

// Which operation a sealed payload is for, so one cannot be replayed as another.
// kv_reserve goes from a head to a decode node; kv_chunk and kv_commit from
// a prefill node (joined to the decode node as a head is) to a decode node.
enum class RequestKind : uint8_t {
  generate = 1,
  abort = 2,
  stop = 3,
  stats = 4,
  flush = 5,
  forward = 6,
  kv_reserve = 7,
  kv_chunk = 8,
  kv_commit = 9,
  kv_freeze = 10,
  kv_move = 11,
  kv_thaw = 12,
  adapter = 13,
};

class RequestSession {
 public:
  RequestSession() = default;  // no key: seals and opens nothing
  explicit RequestSession(std::vector<uint8_t> key) : key_(std::move(key)) {}

  bool has_key() const { return !key_.empty(); }
  // The data plane derives its keys from this one (cluster/transfer/kv_data_plane.hpp).
  const std::vector<uint8_t>& key() const { return key_; }
  // Head side: the next sequence number is used.
  std::vector<uint8_t> seal(RequestKind kind, std::span<const uint8_t> payload);
  // Node side: the payload when the MAC holds under this key and the number
  // is above every number opened so far; else nothing (and no state changes).
  std::optional<std::vector<uint8_t>> open(RequestKind kind, std::span<const uint8_t> sealed);

  static constexpr size_t overhead = 8 + 32;

 private:
  std::vector<uint8_t> key_;
  uint64_t next_ = 1;       // head: the number the next seal uses
  uint64_t last_open_ = 0;  // node: the highest number opened
};

}  // namespace actorlm
