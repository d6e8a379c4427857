#pragma once
// The scheduler's view of the radix-cache and memory-pool managers. Every
// method carries a whole scheduling step's operations for a set of requests,
// so an implementation backed by actors sends one message per manager per
// call — round trips per step stay constant, not per request or per token.
// LocalKvService runs the same operations on a KvStore in-process.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvstore/kv_store.hpp"

namespace actorlm {

struct KvUsage {
  int64_t capacity = 0;
  int64_t free = 0;
  int64_t evictable = 0;
  int64_t protected_ = 0;
  int32_t free_slots = 0;
};

class KvService {
 public:
  virtual ~KvService() = default;

  // Cached prefix length of each key (whole pages; no lock, no state change
  // beyond LRU access times). Used to order the waiting queue.
  virtual std::vector<int32_t> match_lengths(std::span<const std::vector<int32_t>> keys) = 0;
  // For each request: take a slot, match its prompt, lock the match. Returns
  // how many of the requests (a prefix of the list) were admitted; the rest
  // found no slot and are untouched.
  virtual size_t admit(std::span<RequestKv* const> reqs, std::span<const std::vector<int32_t>> prompts) = 0;
  // Rows for every request's new tokens, evicting unlocked cache if short.
  // All-or-nothing: false leaves everything as it was.
  virtual bool extend(std::span<RequestKv* const> reqs, std::span<const std::vector<int32_t>> new_tokens) = 0;
  virtual void cache_unfinished(std::span<RequestKv* const> reqs) = 0;
  // Finished or retracted: cache what they computed, free the rest and the slots.
  virtual void finish(std::span<RequestKv* const> reqs) = 0;
  virtual void abort(std::span<RequestKv* const> reqs) = 0;
  // Speculative decoding: each request keeps its first lengths[i] tokens'
  // KV (KvStore::truncate); the pages of rejected drafts go back at once.
  virtual void truncate(std::span<RequestKv* const> reqs, std::span<const size_t> lengths) = 0;
  virtual KvUsage usage() = 0;
  // Frees all unlocked cache; returns rows freed.
  virtual int64_t flush_cache() = 0;
  // Engine self-check while idle: empty when the pool invariant holds.
  virtual std::string check_idle() = 0;
  // Write-back (KvStore::record_evictions): keep what extend() evicts, and
  // hand it over. Whoever takes it copies the rows' KV before the worker
  // next writes any.
  virtual void record_evictions(bool on) = 0;
  virtual std::vector<RadixCache::EvictedPath> take_evicted() = 0;
};

class LocalKvService final : public KvService {
 public:
  explicit LocalKvService(const KvStoreConfig& config) : store_(config) {}

  std::vector<int32_t> match_lengths(std::span<const std::vector<int32_t>> keys) override;
  size_t admit(std::span<RequestKv* const> reqs, std::span<const std::vector<int32_t>> prompts) override;
  bool extend(std::span<RequestKv* const> reqs, std::span<const std::vector<int32_t>> new_tokens) override;
  void cache_unfinished(std::span<RequestKv* const> reqs) override;
  void finish(std::span<RequestKv* const> reqs) override;
  void abort(std::span<RequestKv* const> reqs) override;
  void truncate(std::span<RequestKv* const> reqs, std::span<const size_t> lengths) override;
  KvUsage usage() override;
  int64_t flush_cache() override;
  std::string check_idle() override;
  void record_evictions(bool on) override { store_.record_evictions(on); }
  std::vector<RadixCache::EvictedPath> take_evicted() override { return store_.take_evicted(); }

  const KvStore& store() const { return store_; }
  // Self-check between steps: the pool invariant with `running` listing every
  // request that holds a slot (Scheduler::running_kv()), locks included.
  std::string check_running(std::span<const RequestKv* const> running) const {
    return store_.check_invariant(running);
  }

 private:
  KvStore store_;
};

}  // namespace actorlm
