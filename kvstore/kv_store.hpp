#pragma once
// The two pools and the radix cache composed in one process, driving one
// request's KV through its life: admit (slot + prefix match + lock), extend
// (prefill chunks and decode steps, evicting LRU cache when short), cache
// between chunks, finish, abort.
//
// In the actor system the same steps are split between the memory-pool
// manager (ReqToTokenPool, TokenToKVPoolAllocator) and the radix-cache manager
// (RadixCache) and travel as messages; KvStore is their single-process form,
// used by tests, benchmarks and the engine's self-check, and the reference for
// what the message protocol must preserve.

#include <cstdint>
#include <span>
#include <string>
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
};

// What the scheduler keeps per request about its KV. Positions
// [0, prefix_len) are shared with the tree and locked through last_node; the
// rest of kv is owned by the request alone.
struct RequestKv {
  int32_t slot = -1;
  std::vector<int32_t> tokens;  // tokens whose KV is computed or allocated
  std::vector<int32_t> kv;      // their rows; same length as tokens
  int32_t prefix_len = 0;
  NodeId last_node = RadixCache::root_id;
  int32_t cached_on_admit = 0;  // prefix length found when admitted (cache hits)
};

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

  // Evicts at least num_tokens rows of unlocked cache if it can; returns how
  // many were freed. evict_all() empties the cache of everything unlocked.
  int64_t evict(int64_t num_tokens);
  int64_t evict_all() { return evict(radix_.evictable_size()); }

  // Rows a running request owns privately, counted in whole pages.
  int64_t private_rows(const RequestKv& req) const;
  // Checks free + evictable + protected + private rows of `running` ==
  // capacity, that no row has two owners, and each structure's own
  // integrity. Empty string when all hold.
  std::string check_invariant(std::span<const RequestKv* const> running) const;

 private:
  void free_rows(std::span<const int32_t> rows);

  KvStoreConfig config_;
  ReqToTokenPool req_to_token_;
  TokenToKVPoolAllocator allocator_;
  RadixCache radix_;
};

}  // namespace actorlm
