// Fuzzes what a decode node does with KV chunks a peer sends it (prefill /
// decode disaggregation, cluster/transfer/kv_transfer.hpp and kv_receiver.hpp).
// Contract: a chunk is refused with a reason or becomes the write of rows the
// ticket reserved, of exactly its range's size; no layer-token row is written
// twice; a commit is accepted only when every row of every layer has arrived;
// a transfer dropped while a write is in flight closes only once it lands.
// The harness keeps its own record of what was written and compares.
//
// Input: byte 0 even: the rest is a KvChunk's FlatBuffers payload, sealed
// here in a correct envelope (the envelope's CRC would refuse nearly every
// mutation before the chunk's own checks; envelope_fuzz covers it). Byte 0 odd: a transfer of 1 + byte 1 % 16 tokens is opened, then each
// 6 bytes (up to 64 times) describe a chunk built with a correct envelope (so the checks past
// the envelope's CRC are reached): first and last layer, first and last
// token (signed), flags (1: another ticket, 2: a damaged data CRC, 4: another
// transfer size, 8: commit after it, 16: its request aborted before this
// chunk's write lands), fill byte.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "cluster/transfer/kv_receiver.hpp"
#include "cluster/transfer/kv_transfer.hpp"
#include "messages/envelope.hpp"

using namespace actorlm;

namespace {

const KvLayout kLayout{"fuzz model", "f32", 3, 4};

void one_chunk(std::span<const uint8_t> bytes) {
  std::string error;
  auto chunk = decode_kv_chunk(bytes, kLayout, &error);
  if (!chunk) {
    if (error.empty()) std::abort();
    return;
  }
  const KvChunkRange& r = chunk->range;
  if (r.first_layer < 0 || r.first_layer >= r.last_layer || r.last_layer > kLayout.n_layers || r.first_token < 0 ||
      r.first_token >= r.last_token || r.last_token > chunk->tokens) {
    std::abort();
  }
  if (static_cast<int64_t>(chunk->data.size()) != r.bytes(kLayout)) std::abort();
}

void transfer(const uint8_t* data, size_t size) {
  const int32_t tokens = 1 + data[0] % 16;
  ++data, --size;
  KvReceiver rx(kLayout);
  std::vector<int32_t> rows(static_cast<size_t>(tokens));
  for (int32_t t = 0; t < tokens; ++t) rows[static_cast<size_t>(t)] = 1000 + 7 * t;
  uint64_t ticket = rx.open(42, rows);
  std::vector<bool> written(static_cast<size_t>(tokens * kLayout.n_layers), false);
  bool open = true;
  // At most 64 chunks: a transfer of 16 tokens by 3 layers has 48 rows, and
  // long inputs of 4 KiB chunks would only slow the run.
  for (int n = 0; size >= 6 && n < 64; data += 6, size -= 6, ++n) {
    KvChunkRange r{static_cast<int8_t>(data[0]) % 8, static_cast<int8_t>(data[1]) % 8,
                   static_cast<int8_t>(data[2]), static_cast<int8_t>(data[3])};
    const uint8_t flags = data[4];
    const int64_t want = r.bytes(kLayout);
    std::vector<uint8_t> payload(static_cast<size_t>(std::clamp<int64_t>(want, 0, 4096)), data[5]);
    const uint64_t id = flags & 1 ? ticket + 1 : ticket;
    std::vector<uint8_t> bytes = encode_kv_chunk(id, kLayout, flags & 4 ? tokens + 1 : tokens, r, payload);
    if (flags & 2) {
      fb::KvChunkT c;
      msg::open<fb::KvChunk>(bytes).message->UnPackTo(&c);
      c.data_crc32 ^= 1;
      bytes = msg::pack(c);
    }
    auto taken = rx.take(bytes);
    const bool may = open && !(flags & 7) && r.first_layer >= 0 && r.first_layer < r.last_layer &&
                     r.last_layer <= kLayout.n_layers && r.first_token >= 0 && r.first_token < r.last_token &&
                     r.last_token <= tokens && want == static_cast<int64_t>(payload.size());
    bool fresh = may;
    for (int32_t l = r.first_layer; fresh && l < r.last_layer; ++l) {
      for (int32_t t = r.first_token; t < r.last_token; ++t) fresh = fresh && !written[static_cast<size_t>(l * tokens + t)];
    }
    if (taken.write.has_value() != fresh) std::abort();
    if (taken.write) {
      const auto& w = *taken.write;
      if (taken.request_id != 42 || w.first_layer != r.first_layer || w.last_layer != r.last_layer) std::abort();
      if (w.rows != std::vector<int32_t>(rows.begin() + r.first_token, rows.begin() + r.last_token)) std::abort();
      if (w.data != payload) std::abort();
      for (int32_t l = r.first_layer; l < r.last_layer; ++l) {
        for (int32_t t = r.first_token; t < r.last_token; ++t) written[static_cast<size_t>(l * tokens + t)] = true;
      }
      if (taken.ticket != ticket) std::abort();
      if (flags & 16) {
        // Its request aborted before this write lands: the transfer closes
        // but holds the abort until the write is reported, then goes.
        if (rx.drop_request(42) || rx.open_transfers() != 1 || !rx.landed(ticket)) std::abort();
        open = false;
        if (rx.open_transfers() != 0) std::abort();
      } else if (rx.landed(ticket)) {
        std::abort();  // written, and the transfer was not dropped: nothing waited on it
      }
    } else if (taken.error.empty()) {
      std::abort();
    }
    if (flags & 8) {
      auto c = rx.commit(ticket);
      bool all = open;
      for (bool w : written) all = all && w;
      if (c.error.empty() != all) std::abort();
      if (open && c.request_id != 42) std::abort();
      open = false;
      if (rx.open_transfers() != 0) std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  if (data[0] % 2 == 0) {
    one_chunk(msg::detail::seal_bytes(msg::KindOf<fb::KvChunk>::kind, std::span<const uint8_t>(data + 1, size - 1)));
  } else {
    transfer(data + 1, size - 1);
  }
  return 0;
}
