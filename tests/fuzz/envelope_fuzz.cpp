// Fuzzes msg::open<T> (envelope checks, then flatbuffers::Verifier) for every
// message kind, then unpacks what verifies into the object API, which reads
// every field. Contract under test: bytes from another process are either
// refused with an error or safe to read in full.
//
// The CRC in the envelope rejects nearly every mutated buffer before the
// verifier sees it, so the input has two modes (byte 0):
//   even: the rest is a whole message, envelope included, taken as is;
//   odd:  byte 1 picks a kind and the rest is a payload, sealed here with a
//         correct envelope, so mutations reach the FlatBuffers verifier.

#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "messages/envelope.hpp"

namespace {

using namespace actorlm;

template <class T>
void open_as(std::span<const uint8_t> bytes, std::optional<msg::Kind> kind) {
  auto opened = msg::open<T>(bytes);
  // open<T> accepts exactly the kind it was asked for, and explains refusals.
  if (opened && kind != msg::KindOf<T>::kind) std::abort();
  if (!opened && opened.error.empty()) std::abort();
  if (opened) {
    typename T::NativeTableType object;
    opened.message->UnPackTo(&object);
  }
}

template <class... T>
void open_as_each(std::span<const uint8_t> bytes) {
  static_assert(sizeof...(T) == msg::max_kind, "a message kind is missing from the fuzz target");
  auto kind = msg::peek_kind(bytes, nullptr);
  (open_as<T>(bytes, kind), ...);
}

void open_every_kind(std::span<const uint8_t> bytes) {
  using namespace actorlm::fb;
  open_as_each<GenerateRequest, TokenizedRequest, Abort, TokenStream, TextDelta, MatchPrefix, MatchPrefixReply,
               Insert, InsertReply, LockRef, LockRefReply, Evict, EvictReply, CacheReqs, CacheReqsReply,
               AllocReqSlots, AllocReqSlotsReply, AllocTokens, AllocTokensReply, Free, FreeReply,
               PoolStatsRequest, PoolStats, ForwardBatch, BatchResult, StatsRequest, EngineStats, NodeHello,
               NodeChallenge, NodeJoin, NodeWelcome, KvChunk,
               KvRowsRequest, KvRowsReply, KvReserveReply, KvHandoff, KvSendOrder, KvMove, KvFreezeReply, AdapterChange,
               AdapterReply, AdapterNews>(bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  if ((data[0] & 1) == 0) {
    // Copied so the message starts on a heap allocation, as received buffers do.
    std::vector<uint8_t> message(data + 1, data + size);
    open_every_kind(message);
  } else {
    auto kind = static_cast<msg::Kind>(1 + data[1] % msg::max_kind);
    auto sealed = msg::detail::seal_bytes(kind, std::span<const uint8_t>(data + 2, size - 2));
    if (msg::peek_kind(sealed, nullptr) != kind) std::abort();
    open_every_kind(sealed);
  }
  return 0;
}
