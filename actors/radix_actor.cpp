#include "actors/radix_actor.hpp"

#include <caf/all.hpp>

#include "actors/dispatch.hpp"
#include "kvstore/kv_error.hpp"
#include "kvstore/radix_cache.hpp"
#include "messages/envelope.hpp"

namespace actorlm {
namespace {

struct RadixState {
  std::unique_ptr<RadixCache> tree;
  static inline const char* name = "actorlm.radix";
};

std::vector<uint8_t> match(RadixCache& t, const fb::MatchPrefix& m) {
  fb::MatchPrefixReplyT r;
  try {
    if (m.queries()) {
      for (const fb::PrefixQuery* q : *m.queries()) {
        auto res = t.match_prefix(to_ints(q->tokens()), {q->priority(), q->lock()});
        if (q->lock()) t.inc_lock_ref(res.last_node);
        auto pm = std::make_unique<fb::PrefixMatchT>();
        pm->request_id = q->request_id();
        pm->indices = std::move(res.indices);
        pm->last_node = res.last_node;
        r.matches.push_back(std::move(pm));
      }
    }
  } catch (const KvStoreError& e) {
    r.error = e.what();
  }
  r.evictable_size = t.evictable_size();
  r.protected_size = t.protected_size();
  return msg::pack(r);
}

std::vector<uint8_t> cache(RadixCache& t, const fb::CacheReqs& m) {
  fb::CacheReqsReplyT r;
  try {
    if (m.reqs()) {
      for (const fb::CacheReq* q : *m.reqs()) {
        auto tokens = to_ints(q->tokens());
        auto kv = to_ints(q->kv_indices());
        auto res = std::make_unique<fb::CacheReqResultT>();
        res->request_id = q->request_id();
        if (q->mode() == fb::CacheMode::Release) {
          auto rows = t.release_req(kv, q->prefix_len(), q->last_node());
          r.to_free.insert(r.to_free.end(), rows.begin(), rows.end());
        } else {
          auto c = q->mode() == fb::CacheMode::Finished ? t.cache_finished_req(tokens, kv, q->prefix_len(), q->last_node(), q->priority())
                                                         : t.cache_unfinished_req(tokens, kv, q->prefix_len(), q->last_node(), q->priority());
          r.to_free.insert(r.to_free.end(), c.to_free.begin(), c.to_free.end());
          res->new_prefix_len = c.new_prefix_len;
          res->new_prefix_indices = std::move(c.new_prefix_indices);
          res->new_last_node = c.new_last_node;
        }
        r.results.push_back(std::move(res));
      }
    }
  } catch (const KvStoreError& e) {
    r.error = e.what();
  }
  return msg::pack(r);
}

std::vector<uint8_t> evict(RadixCache& t, const fb::Evict& m) {
  fb::EvictReplyT r;
  if (!m.only_if_enough() || t.evictable_size() >= m.num_tokens()) {
    std::vector<RadixCache::EvictedPath> paths;
    r.freed = t.evict(m.num_tokens(), m.record() ? &paths : nullptr);
    for (auto& p : paths) {
      auto e = std::make_unique<fb::EvictedPathT>();
      e->tokens = std::move(p.tokens);
      e->rows = std::move(p.rows);
      e->start = p.start;
      r.evicted.push_back(std::move(e));
    }
  }
  r.evictable_size = t.evictable_size();
  return msg::pack(r);
}

WireMessage dispatch(RadixCache& t, const WireMessage& in) {
  std::string error;
  auto kind = msg::peek_kind(in.bytes, &error);
  std::vector<uint8_t> out;
  if (kind) {
    switch (*kind) {
      case msg::Kind::MatchPrefix: out = with_message<fb::MatchPrefix>(in, [&](auto& m) { return match(t, m); }); break;
      case msg::Kind::CacheReqs: out = with_message<fb::CacheReqs>(in, [&](auto& m) { return cache(t, m); }); break;
      case msg::Kind::Evict: out = with_message<fb::Evict>(in, [&](auto& m) { return evict(t, m); }); break;
      default: error = std::string("the radix manager does not handle ") + msg::kind_name(static_cast<uint16_t>(*kind));
    }
  }
  if (out.empty()) {
    fb::CacheReqsReplyT r;
    r.error = error.empty() ? "malformed message" : error;
    out = msg::pack(r);
  }
  return {std::move(out)};
}

caf::behavior radix_manager(caf::stateful_actor<RadixState>* self, int32_t page_size, bool disabled,
                            EvictionPolicy policy) {
  self->state.tree = std::make_unique<RadixCache>(page_size, disabled, policy);
  return {[self](kv_atom, const WireMessage& in) -> WireMessage { return dispatch(*self->state.tree, in); }};
}

}  // namespace

caf::actor spawn_radix_manager(caf::actor_system& system, int32_t page_size, bool disabled, EvictionPolicy policy) {
  return system.spawn(radix_manager, page_size, disabled, policy);
}

}  // namespace actorlm
