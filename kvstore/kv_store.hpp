#pragma once
// The two pools and the radix cache composed in one process, driving one
// request's KV through its life: admit (slot + prefix match + lock), extend
// (prefill chunks and decode steps, evicting LRU cache when short), cache
// between chunks, finish, abort.
//
// Why the request-level operations are split this way: RadixCache's
// cache_finished_req / cache_unfinished_req / release_req do the tree's half
// and RETURN the rows to free; KvStore::finish / cache_unfinished / abort add
// the other half (free those rows through the allocator, rewrite or free the
// request's req_to_token row). In the actor system the same split is the
// message protocol: the radix-cache manager runs the tree's half and the
// memory-pool manager the rest, so the tree never touches the allocator and
// each table keeps a single writer. KvStore is the single-process form, used
// by tests, benchmarks, the in-process scheduler service and the engine's
// self-check, and the reference for what the messages must preserve.
//
//   SGLang                      here
//   cache_finished_req(req)     KvStore::finish      (RadixCache::cache_finished_req + frees + slot)
//   cache_unfinished_req(req)   KvStore::cache_unfinished (RadixCache::cache_unfinished_req + req_to_token)
//   (abort path)                KvStore::abort       (RadixCache::release_req + frees + slot)
//
// Not thread-safe; one owner. Contract violations (a request without a slot,
// a prompt longer than the context, a request listed twice in a batch, a
// prefix that disagrees with the tree) throw KvStoreError before anything
// changes.

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvstore/radix_cache.hpp"
#include "kvstore/req_to_token_pool.hpp"
#include "kvstore/token_to_kv_pool_allocator.hpp"

namespace actorlm {

struct KvStoreConfig {
  int64_t capacity_tokens = 0;  // rows in the token-to-KV pool (rounded down to pages)
  int32_t page_size = 1;
  int32_t max_requests = 0;     // request slots
  int32_t max_context_len = 0;  // positions per slot
  bool disable_radix_cache = false;
  EvictionPolicy eviction = EvictionPolicy::lru;  // --radix-eviction-policy
};

// What the scheduler keeps per request about its KV. Positions
// [0, prefix_len) are shared with the tree and locked through last_node
// (kv[0, prefix_len) are the tree's rows, the request's "prefix indices");
// the rest of kv is owned by the request alone, in whole pages. prefix_len is
// always a multiple of the page size. A default-constructed RequestKv (slot
// -1) is one that holds nothing.
struct RequestKv {
  int32_t slot = -1;
  std::vector<int32_t> tokens;  // tokens whose KV is computed or allocated
  std::vector<int32_t> kv;      // their rows; same length as tokens
  int32_t prefix_len = 0;
  NodeId last_node = RadixCache::root_id;
  int32_t cached_on_admit = 0;  // prefix length found when admitted (cache hits)
  // The request's urgency (larger: more urgent), set before admission: the
  // cache's priority eviction keeps the prefixes it used longer.
  int64_t priority = 0;
};

// The rows truncating `req` to `length` tokens gives back: one per page
// that only positions >= length use (the allocator frees pages). Throws
// KvStoreError for a length inside the cached prefix or past the end.
std::vector<int32_t> truncated_rows(const RequestKv& req, size_t length, int32_t page_size);

class KvStore {
 public:
  explicit KvStore(const KvStoreConfig& config);

  ReqToTokenPool& req_to_token() { return req_to_token_; }
  TokenToKVPoolAllocator& allocator() { return allocator_; }
  RadixCache& radix() { return radix_; }
  const ReqToTokenPool& req_to_token() const { return req_to_token_; }
  const TokenToKVPoolAllocator& allocator() const { return allocator_; }
  const RadixCache& radix() const { return radix_; }

  // Takes a slot, matches `prompt` (all but its last token, which must be
  // computed to get logits) and locks the match. false when no slot is free.
  bool admit(RequestKv& req, std::span<const int32_t> prompt);

  // Allocates rows for new_tokens at the request's next positions and records
  // them in req_to_token, evicting unlocked cache when the pool is short.
  // false (nothing changed) when even eviction cannot make room.
  bool extend(RequestKv& req, std::span<const int32_t> new_tokens);
  // The same for a batch, all-or-nothing (one allocator call per step).
  bool extend_batch(std::span<RequestKv* const> reqs,
                    std::span<const std::span<const int32_t>> new_tokens);

  // Between prefill chunks: share the request's whole pages through the tree.
  void cache_unfinished(RequestKv& req);
  // Done (or retracted): insert into the tree, free duplicates, tail and slot.
  void finish(RequestKv& req);
  // Aborted: free what the request owns and its slot; nothing is inserted.
  void abort(RequestKv& req);
  // Speculative decoding rejected the request's last drafted tokens: keeps
  // its first `length` tokens (never fewer than its cached prefix) and frees
  // the pages only the dropped ones used. A partly used last page stays the
  // request's, as after any extend.
  void truncate(RequestKv& req, size_t length);

  // Write-back to a tier below the pool: while on, the paths extend() evicts
  // are kept until take_evicted() hands them over. The caller must copy
  // their rows' KV before anything writes to the rows extend() returned.
  void record_evictions(bool on) { record_evictions_ = on; }
  std::vector<RadixCache::EvictedPath> take_evicted() { return std::exchange(evicted_, {}); }

  // Evicts at least num_tokens rows of unlocked cache if it can; returns how
  // many were freed. evict_all() empties the cache of everything unlocked.
  int64_t evict(int64_t num_tokens);
  int64_t evict_all() { return evict(radix_.evictable_size()); }

  // Rows a running request owns privately (kv[prefix_len, end)), counted in
  // whole pages: a partly used last page is held entirely.
  int64_t private_rows(const RequestKv& req) const;
  // Checks free + evictable + protected + private rows of `running` ==
  // capacity, that no page has two owners (free list, tree, requests), that
  // each request's req_to_token row equals its kv and its prefix is the
  // tree's locked path, that every node's lock count is exactly the number
  // of running requests whose prefix runs through it (so a lock leaked by a
  // finished or aborted request fails here, at once), and each structure's
  // own integrity. `running` must list every request that holds a slot.
  // Empty string when all hold.
  std::string check_invariant(std::span<const RequestKv* const> running) const;

 private:
  void free_rows(std::span<const int32_t> rows);
  void require_running(const RequestKv& req, const char* what) const;

  KvStoreConfig config_;
  ReqToTokenPool req_to_token_;
  TokenToKVPoolAllocator allocator_;
  RadixCache radix_;
  bool record_evictions_ = false;
  std::vector<RadixCache::EvictedPath> evicted_;
};

}  // namespace actorlm
