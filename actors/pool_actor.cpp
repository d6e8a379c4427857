#include "actors/pool_actor.hpp"

#include <caf/all.hpp>

#include "actors/dispatch.hpp"
#include "kvstore/kv_error.hpp"
#include "messages/envelope.hpp"

namespace actorlm {
namespace {

struct PoolState {
  std::unique_ptr<ReqToTokenPool> slots;
  std::unique_ptr<TokenToKVPoolAllocator> allocator;
  static inline const char* name = "actorlm.pool";
};

std::vector<uint8_t> alloc_slots(PoolState& s, const fb::AllocReqSlots& m) {
  fb::AllocReqSlotsReplyT r;
  if (m.count() < 0) {
    r.error = "negative slot count";
  } else if (auto got = s.slots->alloc(m.count())) {
    r.slots = *got;
  }
  r.free_slots = s.slots->available_size();
  return msg::pack(r);
}

std::vector<uint8_t> alloc_tokens(PoolState& s, const fb::AllocTokens& m) {
  fb::AllocTokensReplyT r;
  std::vector<int32_t> prefix, seq, last;
  if (m.reqs()) {
    for (const fb::TokenAlloc* a : *m.reqs()) {
      prefix.push_back(a->prefix_len());
      seq.push_back(a->seq_len());
      last.push_back(a->last_loc());
    }
  }
  try {
    int64_t short_pages = s.allocator->pages_needed(prefix, seq) - s.allocator->free_pages();
    if (auto rows = s.allocator->alloc_extend(prefix, seq, last)) {
      r.ok = true;
      r.out_cache_loc = std::move(*rows);
    } else {
      r.shortfall_tokens = short_pages * s.allocator->page_size();
    }
  } catch (const KvStoreError& e) {
    r.error = e.what();
  }
  r.free_tokens = s.allocator->available_size();
  return msg::pack(r);
}

std::vector<uint8_t> free_rows(PoolState& s, const fb::Free& m) {
  fb::FreeReplyT r;
  try {
    auto rows = to_ints(m.kv_indices());
    if (!rows.empty()) s.allocator->free(rows);
    for (int32_t slot : to_ints(m.req_slots())) s.slots->free(slot);
  } catch (const KvStoreError& e) {
    r.error = e.what();
  }
  r.free_tokens = s.allocator->available_size();
  r.free_req_slots = s.slots->available_size();
  return msg::pack(r);
}

std::vector<uint8_t> stats(PoolState& s, const fb::PoolStatsRequest& m) {
  fb::PoolStatsT r;
  r.capacity_tokens = s.allocator->capacity();
  r.free_tokens = s.allocator->available_size();
  r.page_size = s.allocator->page_size();
  r.req_slots = s.slots->size();
  r.free_req_slots = s.slots->available_size();
  if (m.check_integrity()) r.integrity_error = s.allocator->check_integrity();
  return msg::pack(r);
}

WireMessage dispatch(PoolState& s, const WireMessage& in) {
  std::string error;
  auto kind = msg::peek_kind(in.bytes, &error);
  std::vector<uint8_t> out;
  if (kind) {
    switch (*kind) {
      case msg::Kind::AllocReqSlots: out = with_message<fb::AllocReqSlots>(in, [&](auto& m) { return alloc_slots(s, m); }); break;
      case msg::Kind::AllocTokens: out = with_message<fb::AllocTokens>(in, [&](auto& m) { return alloc_tokens(s, m); }); break;
      case msg::Kind::Free: out = with_message<fb::Free>(in, [&](auto& m) { return free_rows(s, m); }); break;
      case msg::Kind::PoolStatsRequest: out = with_message<fb::PoolStatsRequest>(in, [&](auto& m) { return stats(s, m); }); break;
      default: error = std::string("the pool manager does not handle ") + msg::kind_name(static_cast<uint16_t>(*kind));
    }
  }
  if (out.empty()) {  // rejected: answer with a FreeReply carrying the reason
    fb::FreeReplyT r;
    r.error = error.empty() ? "malformed message" : error;
    out = msg::pack(r);
  }
  return {std::move(out)};
}

caf::behavior pool_manager(caf::stateful_actor<PoolState>* self, KvStoreConfig config) {
  self->state.slots = std::make_unique<ReqToTokenPool>(config.max_requests, config.max_context_len);
  self->state.allocator = std::make_unique<TokenToKVPoolAllocator>(config.capacity_tokens, config.page_size);
  return {[self](kv_atom, const WireMessage& in) -> WireMessage { return dispatch(self->state, in); }};
}

}  // namespace

caf::actor spawn_pool_manager(caf::actor_system& system, const KvStoreConfig& config) {
  return system.spawn(pool_manager, config);
}

}  // namespace actorlm
