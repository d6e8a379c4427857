#pragma once
// One request's KV rows moving from a prefill engine to a decode engine
// (prefill/decode disaggregation), as bounded, self-describing chunks. No
// CAF: the sender plans chunks and reads each from its pool
// (ModelRunner::read_kv), the receiver checks each against its own layout
// and what has arrived before, then writes it (ModelRunner::write_kv).
//
// A chunk carries the request id, the sender's model digest and KV layout,
// its layer and token range and a CRC-32 of its data, inside the message
// envelope (which has its own CRC over the whole buffer). Nothing about a
// chunk is trusted: a foreign model, another dtype, a range outside the
// transfer, a size that does not match the range, a repeated range or a
// damaged byte is refused.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cluster/transport/cluster_handshake.hpp"
#include "model/model_runner.hpp"

namespace actorlm {

// What a transfer's bytes mean; both ends must have the same.
struct KvLayout {
  std::string model_digest;  // kv_model_digest(): model, shape, tokenizer
  std::string dtype;         // the pool's element type
  int32_t n_layers = 0;
  int64_t token_bytes = 0;   // K plus V of one token in one layer
  bool operator==(const KvLayout&) const = default;
};

std::string kv_model_digest(const NodeModel& model);
// The layout of `runner`'s pool for a model described by `model`.
KvLayout kv_layout(const ModelRunner& runner, const NodeModel& model);

// Layers [first_layer, last_layer) of tokens [first_token, last_token).
struct KvChunkRange {
  int32_t first_layer = 0, last_layer = 0;
  int32_t first_token = 0, last_token = 0;
  int64_t bytes(const KvLayout& layout) const {
    return static_cast<int64_t>(last_layer - first_layer) * (last_token - first_token) * layout.token_bytes;
  }
  bool operator==(const KvChunkRange&) const = default;
};

// Covers every layer of `tokens` tokens with chunks of at most max_bytes
// each (one token of one layer when even that is larger): runs of whole
// layers while one layer of all tokens fits, else token runs within a layer.
// Layer-major, so a receiver could start on the first layers early.
std::vector<KvChunkRange> plan_kv_chunks(int32_t tokens, const KvLayout& layout, int64_t max_bytes);
// The same over tokens [first_token, last_token) only: the part of a
// streamed transfer whose rows are ready.
std::vector<KvChunkRange> plan_kv_chunks(int32_t first_token, int32_t last_token, const KvLayout& layout, int64_t max_bytes);

std::vector<uint8_t> encode_kv_chunk(uint64_t request_id, const KvLayout& layout, int32_t tokens,
                                     const KvChunkRange& range, std::span<const uint8_t> data);

struct KvChunk {
  uint64_t request_id = 0;
  int32_t tokens = 0;  // of the whole transfer
  KvChunkRange range;
  std::vector<uint8_t> data;
};

// Opens a chunk and checks it against the receiver's layout `mine`: same
// digest, dtype, layer count and token size, a range inside the transfer,
// data of the range's size and the right CRC. nullopt (with *error) if not.
std::optional<KvChunk> decode_kv_chunk(std::span<const uint8_t> bytes, const KvLayout& mine, std::string* error);

// The receiving end of one transfer: admits each chunk once (no range
// overlaps one already taken) and says when every layer of every token has
// arrived, so decoding starts on complete KV only.
class KvAssembly {
 public:
  KvAssembly(uint64_t request_id, int32_t tokens, int32_t n_layers);
  // nullopt: taken (the caller writes its data); else why it is refused.
  std::optional<std::string> accept(const KvChunk& chunk);
  bool complete() const { return missing_ == 0; }
  int64_t missing() const { return missing_; }

 private:
  uint64_t request_id_;
  int32_t tokens_, n_layers_;
  std::vector<bool> have_;  // [layer][token]
  int64_t missing_;
};

}  // namespace actorlm
