#pragma once
// Every message the actors exchange, as a kind number (carried in the
// envelope) and a 4-character FlatBuffers file identifier (carried in the
// buffer). KindOf<T> maps a root table type to both, at compile time: actors
// dispatch on Kind, never on strings.

#include <cstdint>

#include "messages/cluster_generated.h"
#include "messages/forward_generated.h"
#include "messages/kv_transfer_generated.h"
#include "messages/pool_generated.h"
#include "messages/radix_generated.h"
#include "messages/request_generated.h"
#include "messages/stats_generated.h"

namespace actorlm::msg {

enum class Kind : uint16_t {
  GenerateRequest = 1,
  TokenizedRequest,
  Abort,
  TokenStream,
  TextDelta,
  MatchPrefix,
  MatchPrefixReply,
  Insert,
  InsertReply,
  LockRef,
  LockRefReply,
  Evict,
  EvictReply,
  CacheReqs,
  CacheReqsReply,
  AllocReqSlots,
  AllocReqSlotsReply,
  AllocTokens,
  AllocTokensReply,
  Free,
  FreeReply,
  PoolStatsRequest,
  PoolStats,
  ForwardBatch,
  BatchResult,
  StatsRequest,
  EngineStats,
  NodeHello,
  NodeChallenge,
  NodeJoin,
  NodeWelcome,
  KvChunk,
  KvRowsRequest,
  KvRowsReply,
  KvReserveReply,
  KvHandoff,
  KvSendOrder,
  KvMove,
  KvFreezeReply,
  AdapterChange,
  AdapterReply,
  AdapterNews,
};
inline constexpr uint16_t max_kind = static_cast<uint16_t>(Kind::AdapterNews);

// Name of a kind, "unknown" for numbers outside the enum.
const char* kind_name(uint16_t kind);

template <class T>
struct KindOf;

#define ACTORLM_MESSAGE_KIND(Type, ident)               \
  template <>                                           \
  struct KindOf<fb::Type> {                             \
    static constexpr Kind kind = Kind::Type;            \
    static constexpr const char* identifier = ident;    \
  }

ACTORLM_MESSAGE_KIND(GenerateRequest, "GREQ");
ACTORLM_MESSAGE_KIND(TokenizedRequest, "TREQ");
ACTORLM_MESSAGE_KIND(Abort, "ABRT");
ACTORLM_MESSAGE_KIND(TokenStream, "TSTR");
ACTORLM_MESSAGE_KIND(TextDelta, "TXTD");
ACTORLM_MESSAGE_KIND(MatchPrefix, "MPFX");
ACTORLM_MESSAGE_KIND(MatchPrefixReply, "MPFR");
ACTORLM_MESSAGE_KIND(Insert, "INSQ");
ACTORLM_MESSAGE_KIND(InsertReply, "INSR");
ACTORLM_MESSAGE_KIND(LockRef, "LOCK");
ACTORLM_MESSAGE_KIND(LockRefReply, "LCKR");
ACTORLM_MESSAGE_KIND(Evict, "EVIC");
ACTORLM_MESSAGE_KIND(EvictReply, "EVCR");
ACTORLM_MESSAGE_KIND(CacheReqs, "CREQ");
ACTORLM_MESSAGE_KIND(CacheReqsReply, "CRQR");
ACTORLM_MESSAGE_KIND(AllocReqSlots, "ARSQ");
ACTORLM_MESSAGE_KIND(AllocReqSlotsReply, "ARSR");
ACTORLM_MESSAGE_KIND(AllocTokens, "ATKQ");
ACTORLM_MESSAGE_KIND(AllocTokensReply, "ATKR");
ACTORLM_MESSAGE_KIND(Free, "FREQ");
ACTORLM_MESSAGE_KIND(FreeReply, "FRER");
ACTORLM_MESSAGE_KIND(PoolStatsRequest, "PSTQ");
ACTORLM_MESSAGE_KIND(PoolStats, "PSTR");
ACTORLM_MESSAGE_KIND(ForwardBatch, "FWDB");
ACTORLM_MESSAGE_KIND(BatchResult, "BRES");
ACTORLM_MESSAGE_KIND(StatsRequest, "STAQ");
ACTORLM_MESSAGE_KIND(EngineStats, "STAR");
ACTORLM_MESSAGE_KIND(NodeHello, "NHLO");
ACTORLM_MESSAGE_KIND(NodeChallenge, "NCHL");
ACTORLM_MESSAGE_KIND(NodeJoin, "NJON");
ACTORLM_MESSAGE_KIND(NodeWelcome, "NWEL");
ACTORLM_MESSAGE_KIND(KvChunk, "KVCH");
ACTORLM_MESSAGE_KIND(KvRowsRequest, "KVRQ");
ACTORLM_MESSAGE_KIND(KvRowsReply, "KVRR");
ACTORLM_MESSAGE_KIND(KvReserveReply, "KVSR");
ACTORLM_MESSAGE_KIND(KvHandoff, "KVHO");
ACTORLM_MESSAGE_KIND(KvSendOrder, "KVSO");
ACTORLM_MESSAGE_KIND(KvMove, "KVMV");
ACTORLM_MESSAGE_KIND(KvFreezeReply, "KVFZ");
ACTORLM_MESSAGE_KIND(AdapterChange, "ADCH");
ACTORLM_MESSAGE_KIND(AdapterReply, "ADRP");
ACTORLM_MESSAGE_KIND(AdapterNews, "ADNW");

#undef ACTORLM_MESSAGE_KIND

}  // namespace actorlm::msg
