#include "actors/actor_kv_service.hpp"

#include <caf/all.hpp>
#include <stdexcept>

#include "actors/forward_codec.hpp"
#include "messages/envelope.hpp"

namespace actorlm {
namespace {

template <class T>
typename T::NativeTableType open_reply(const std::vector<uint8_t>& bytes, const char* who) {
  std::string error;
  auto r = msg::unpack<T>(bytes, &error);
  if (!r) throw std::runtime_error(std::string(who) + " sent an unreadable reply: " + error);
  return std::move(*r);
}

void check(const std::string& error, const char* who) {
  if (!error.empty()) throw std::runtime_error(std::string(who) + ": " + error);
}

// A well-formed reply can still be wrong; its sizes are checked before any
// index into it, so a confused manager is an error, not a read out of range.
void check_count(size_t got, size_t want, const char* who, const char* what) {
  if (got != want) {
    throw std::runtime_error(std::string(who) + " answered with " + std::to_string(got) + " " + what + " for " +
                             std::to_string(want));
  }
}

}  // namespace

ActorKvService::ActorKvService(caf::blocking_actor* self, caf::actor pool, caf::actor radix,
                               std::chrono::milliseconds timeout)
    : self_(self), pool_(std::move(pool)), radix_(std::move(radix)), timeout_(timeout) {}

std::vector<uint8_t> ActorKvService::ask(const caf::actor& to, const char* who, std::vector<uint8_t> bytes) {
  ++round_trips_;
  std::vector<uint8_t> out;
  std::string failure;
  self_->request(to, timeout_, kv_atom::value, WireMessage{std::move(bytes)})
      .receive([&](WireMessage& reply) { out = std::move(reply.bytes); },
               [&](caf::error& err) { failure = self_->system().render(err); });
  if (!failure.empty()) throw std::runtime_error(std::string(who) + " unreachable: " + failure);
  return out;
}

void ActorKvService::free_rows(std::vector<int32_t> rows, std::vector<int32_t> slots) {
  if (rows.empty() && slots.empty()) return;
  fb::FreeT m;
  m.kv_indices = std::move(rows);
  m.req_slots = std::move(slots);
  check(open_reply<fb::FreeReply>(ask(pool_, "memory-pool manager", msg::pack(m)), "memory-pool manager").error,
        "memory-pool manager");
}

std::vector<int32_t> ActorKvService::match_lengths(std::span<const std::vector<int32_t>> keys) {
  fb::MatchPrefixT m;
  for (const auto& k : keys) {
    auto q = std::make_unique<fb::PrefixQueryT>();
    q->tokens.assign(k.begin(), k.empty() ? k.end() : k.end() - 1);
    m.queries.push_back(std::move(q));
  }
  auto r = open_reply<fb::MatchPrefixReply>(ask(radix_, "radix-cache manager", msg::pack(m)), "radix-cache manager");
  check(r.error, "radix-cache manager");
  check_count(r.matches.size(), keys.size(), "radix-cache manager", "matches");
  std::vector<int32_t> out;
  for (const auto& pm : r.matches) out.push_back(static_cast<int32_t>(pm->indices.size()));
  return out;
}

size_t ActorKvService::admit(std::span<RequestKv* const> reqs, std::span<const std::vector<int32_t>> prompts) {
  if (reqs.empty()) return 0;
  fb::AllocReqSlotsT a;
  a.count = static_cast<int32_t>(reqs.size());
  auto slots = open_reply<fb::AllocReqSlotsReply>(ask(pool_, "memory-pool manager", msg::pack(a)), "memory-pool manager");
  if (slots.slots.empty() && slots.free_slots > 0) {  // fewer free than asked: take what there is
    a.count = slots.free_slots;
    slots = open_reply<fb::AllocReqSlotsReply>(ask(pool_, "memory-pool manager", msg::pack(a)), "memory-pool manager");
  }
  check(slots.error, "memory-pool manager");
  size_t n = std::min(slots.slots.size(), reqs.size());
  if (n == 0) return 0;
  fb::MatchPrefixT m;
  for (size_t i = 0; i < n; ++i) {
    auto q = std::make_unique<fb::PrefixQueryT>();
    const auto& p = prompts[i];
    q->tokens.assign(p.begin(), p.empty() ? p.end() : p.end() - 1);
    q->lock = true;
    q->priority = reqs[i]->priority;
    m.queries.push_back(std::move(q));
  }
  auto r = open_reply<fb::MatchPrefixReply>(ask(radix_, "radix-cache manager", msg::pack(m)), "radix-cache manager");
  check(r.error, "radix-cache manager");
  check_count(r.matches.size(), n, "radix-cache manager", "matches");
  for (size_t i = 0; i < n; ++i) {
    RequestKv& k = *reqs[i];
    k.slot = slots.slots[i];
    k.kv = r.matches[i]->indices;
    k.prefix_len = static_cast<int32_t>(k.kv.size());
    k.cached_on_admit = k.prefix_len;
    k.last_node = r.matches[i]->last_node;
    k.tokens.assign(prompts[i].begin(), prompts[i].begin() + k.prefix_len);
  }
  return n;
}

bool ActorKvService::extend(std::span<RequestKv* const> reqs, std::span<const std::vector<int32_t>> new_tokens) {
  fb::AllocTokensT a;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto t = std::make_unique<fb::TokenAllocT>();
    t->slot = reqs[i]->slot;
    t->prefix_len = static_cast<int32_t>(reqs[i]->kv.size());
    t->seq_len = t->prefix_len + static_cast<int32_t>(new_tokens[i].size());
    t->last_loc = reqs[i]->kv.empty() ? -1 : reqs[i]->kv.back();
    a.reqs.push_back(std::move(t));
  }
  auto bytes = msg::pack(a);
  auto r = open_reply<fb::AllocTokensReply>(ask(pool_, "memory-pool manager", bytes), "memory-pool manager");
  check(r.error, "memory-pool manager");
  if (!r.ok) {
    // Short: evict unlocked cache, give its rows to the pool, try once more.
    // Only if eviction covers the whole shortfall: a refused extend must not
    // have thrown the cache away (KvService::extend is all-or-nothing, as
    // KvStore::extend_batch is).
    fb::EvictT e;
    e.num_tokens = r.shortfall_tokens;
    e.only_if_enough = true;
    e.record = record_evictions_;
    auto ev = open_reply<fb::EvictReply>(ask(radix_, "radix-cache manager", msg::pack(e)), "radix-cache manager");
    if (ev.freed.empty()) return false;
    for (auto& p : ev.evicted) {
      if (p->tokens.size() != p->rows.size() || p->start < 0 || static_cast<size_t>(p->start) >= p->tokens.size()) {
        throw std::runtime_error("radix-cache manager answered an evicted path that does not add up");
      }
      evicted_.push_back({std::move(p->tokens), std::move(p->rows), p->start});
    }
    free_rows(std::move(ev.freed), {});
    r = open_reply<fb::AllocTokensReply>(ask(pool_, "memory-pool manager", bytes), "memory-pool manager");
    check(r.error, "memory-pool manager");
    if (!r.ok) return false;
  }
  size_t wanted = 0;
  for (const auto& t : new_tokens) wanted += t.size();
  check_count(r.out_cache_loc.size(), wanted, "memory-pool manager", "KV rows");
  size_t at = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    RequestKv& k = *reqs[i];
    k.tokens.insert(k.tokens.end(), new_tokens[i].begin(), new_tokens[i].end());
    k.kv.insert(k.kv.end(), r.out_cache_loc.begin() + static_cast<ptrdiff_t>(at),
                r.out_cache_loc.begin() + static_cast<ptrdiff_t>(at + new_tokens[i].size()));
    at += new_tokens[i].size();
  }
  return true;
}

// mode: the fb::CacheMode value.
void ActorKvService::cache(std::span<RequestKv* const> reqs, int mode) {
  if (reqs.empty()) return;
  fb::CacheReqsT m;
  for (RequestKv* k : reqs) {
    auto q = std::make_unique<fb::CacheReqT>();
    q->mode = static_cast<fb::CacheMode>(mode);
    q->tokens = k->tokens;
    q->kv_indices = k->kv;
    q->prefix_len = k->prefix_len;
    q->last_node = k->last_node;
    q->priority = k->priority;
    m.reqs.push_back(std::move(q));
  }
  auto r = open_reply<fb::CacheReqsReply>(ask(radix_, "radix-cache manager", msg::pack(m)), "radix-cache manager");
  check(r.error, "radix-cache manager");
  const bool unfinished = mode == static_cast<int>(fb::CacheMode::Unfinished);
  if (unfinished) check_count(r.results.size(), reqs.size(), "radix-cache manager", "results");
  std::vector<int32_t> slots;
  for (size_t i = 0; i < reqs.size(); ++i) {
    RequestKv& k = *reqs[i];
    if (unfinished) {
      const auto& res = *r.results[i];
      if (res.new_prefix_len < 0 || static_cast<size_t>(res.new_prefix_len) > k.kv.size() ||
          res.new_prefix_indices.size() < static_cast<size_t>(res.new_prefix_len)) {
        throw std::runtime_error("radix-cache manager answered a prefix outside the request");
      }
      for (int32_t p = k.prefix_len; p < res.new_prefix_len; ++p) k.kv[static_cast<size_t>(p)] = res.new_prefix_indices[static_cast<size_t>(p)];
      k.prefix_len = res.new_prefix_len;
      k.last_node = res.new_last_node;
    } else {
      slots.push_back(k.slot);
      k = RequestKv{};
    }
  }
  free_rows(std::move(r.to_free), std::move(slots));
}

void ActorKvService::cache_unfinished(std::span<RequestKv* const> reqs) { cache(reqs, static_cast<int>(fb::CacheMode::Unfinished)); }
void ActorKvService::finish(std::span<RequestKv* const> reqs) { cache(reqs, static_cast<int>(fb::CacheMode::Finished)); }
void ActorKvService::abort(std::span<RequestKv* const> reqs) {
  std::vector<RequestKv*> held;
  for (RequestKv* k : reqs) {
    if (k->slot >= 0) held.push_back(k);
  }
  cache(held, static_cast<int>(fb::CacheMode::Release));
}

void ActorKvService::truncate(std::span<RequestKv* const> reqs, std::span<const size_t> lengths) {
  if (page_size_ == 0) {
    auto p = open_reply<fb::PoolStats>(ask(pool_, "memory-pool manager", msg::pack(fb::PoolStatsRequestT{})),
                                       "memory-pool manager");
    if (p.page_size < 1) throw std::runtime_error("memory-pool manager answered a page size below 1");
    page_size_ = p.page_size;
  }
  std::vector<int32_t> rows;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::vector<int32_t> mine = truncated_rows(*reqs[i], lengths[i], page_size_);
    rows.insert(rows.end(), mine.begin(), mine.end());
  }
  free_rows(std::move(rows), {});
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i]->kv.resize(lengths[i]);
    reqs[i]->tokens.resize(lengths[i]);
  }
}

KvUsage ActorKvService::usage() {
  fb::PoolStatsRequestT q;
  auto p = open_reply<fb::PoolStats>(ask(pool_, "memory-pool manager", msg::pack(q)), "memory-pool manager");
  auto r = open_reply<fb::MatchPrefixReply>(ask(radix_, "radix-cache manager", msg::pack(fb::MatchPrefixT{})),
                                            "radix-cache manager");
  return {p.capacity_tokens, p.free_tokens, r.evictable_size, r.protected_size, p.free_req_slots};
}

int64_t ActorKvService::flush_cache() {
  fb::EvictT e;
  e.num_tokens = INT64_MAX;
  auto ev = open_reply<fb::EvictReply>(ask(radix_, "radix-cache manager", msg::pack(e)), "radix-cache manager");
  auto n = static_cast<int64_t>(ev.freed.size());
  free_rows(std::move(ev.freed), {});
  return n;
}

std::string ActorKvService::check_idle() {
  fb::PoolStatsRequestT q;
  q.check_integrity = true;
  auto p = open_reply<fb::PoolStats>(ask(pool_, "memory-pool manager", msg::pack(q)), "memory-pool manager");
  auto r = open_reply<fb::MatchPrefixReply>(ask(radix_, "radix-cache manager", msg::pack(fb::MatchPrefixT{})),
                                            "radix-cache manager");
  if (!p.integrity_error.empty()) return "pool: " + p.integrity_error;
  if (p.free_req_slots != p.req_slots) return "request slots still held";
  if (r.protected_size != 0) return "cache still locked";
  if (p.free_tokens + r.evictable_size != p.capacity_tokens) {
    return "pool accounting: free " + std::to_string(p.free_tokens) + " + cached " + std::to_string(r.evictable_size) +
           " != capacity " + std::to_string(p.capacity_tokens);
  }
  return {};
}

}  // namespace actorlm
