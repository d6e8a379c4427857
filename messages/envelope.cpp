#include "messages/envelope.hpp"

#include <zlib.h>

#include <cstring>

namespace actorlm::msg {
namespace {

constexpr uint8_t magic[4] = {'A', 'L', 'M', '1'};

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

uint32_t checksum(const uint8_t* header, std::span<const uint8_t> payload) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, header, 12);
  // zlib takes uInt lengths; payloads are capped far below 4 GiB.
  crc = crc32(crc, payload.data(), static_cast<uInt>(payload.size()));
  return static_cast<uint32_t>(crc);
}

constexpr const char* kind_names[] = {
    "unknown",        "GenerateRequest", "TokenizedRequest", "Abort",          "TokenStream",
    "TextDelta",      "MatchPrefix",     "MatchPrefixReply", "Insert",         "InsertReply",
    "LockRef",        "LockRefReply",    "Evict",            "EvictReply",     "CacheReqs",
    "CacheReqsReply", "AllocReqSlots",   "AllocReqSlotsReply", "AllocTokens",  "AllocTokensReply",
    "Free",           "FreeReply",       "PoolStatsRequest", "PoolStats",      "ForwardBatch",
    "BatchResult",    "StatsRequest",    "EngineStats",      "NodeHello",      "NodeChallenge",
    "NodeJoin",       "NodeWelcome",     "KvChunk",          "KvRowsRequest",  "KvRowsReply",
    "KvReserveReply", "KvHandoff", "KvSendOrder", "KvMove", "KvFreezeReply",
    "AdapterChange",  "AdapterReply",    "AdapterNews"};
static_assert(sizeof(kind_names) / sizeof(kind_names[0]) == max_kind + 1);

}  // namespace

const char* kind_name(uint16_t kind) { return kind <= max_kind ? kind_names[kind] : kind_names[0]; }

namespace detail {

std::vector<uint8_t> seal_bytes(Kind kind, std::span<const uint8_t> payload) {
  std::vector<uint8_t> out(envelope_size + payload.size());
  std::memcpy(out.data(), magic, 4);
  put16(out.data() + 4, envelope_version);
  put16(out.data() + 6, static_cast<uint16_t>(kind));
  put32(out.data() + 8, static_cast<uint32_t>(payload.size()));
  std::memcpy(out.data() + envelope_size, payload.data(), payload.size());
  put32(out.data() + 12, checksum(out.data(), payload));
  return out;
}

}  // namespace detail

std::optional<Kind> peek_kind(std::span<const uint8_t> bytes, std::string* error) {
  auto fail = [&](std::string why) -> std::optional<Kind> {
    if (error) *error = std::move(why);
    return std::nullopt;
  };
  if (bytes.size() < envelope_size) {
    return fail("message too short: " + std::to_string(bytes.size()) + " bytes, envelope needs " +
                std::to_string(envelope_size));
  }
  if (bytes.size() > max_message_bytes) {
    return fail("message too large: " + std::to_string(bytes.size()) + " bytes");
  }
  const uint8_t* h = bytes.data();
  if (std::memcmp(h, magic, 4) != 0) return fail("bad magic: not an actorlm message");
  if (get16(h + 4) != envelope_version) {
    return fail("unsupported envelope version " + std::to_string(get16(h + 4)));
  }
  uint16_t kind = get16(h + 6);
  if (kind == 0 || kind > max_kind) return fail("unknown message kind " + std::to_string(kind));
  uint32_t len = get32(h + 8);
  if (len != bytes.size() - envelope_size) {
    return fail("payload length " + std::to_string(len) + " does not match the " +
                std::to_string(bytes.size() - envelope_size) + " bytes received");
  }
  auto payload = bytes.subspan(envelope_size);
  if (checksum(h, payload) != get32(h + 12)) return fail("checksum mismatch: message is corrupted");
  // The FlatBuffer's root offset must be 4-byte aligned in memory for the
  // verifier; received byte vectors always are (heap allocations).
  if (reinterpret_cast<uintptr_t>(payload.data()) % 4 != 0) {
    return fail("payload is not 4-byte aligned in memory");
  }
  return static_cast<Kind>(kind);
}

}  // namespace actorlm::msg
