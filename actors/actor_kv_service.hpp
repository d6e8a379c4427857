#pragma once
// KvService over the radix-cache and memory-pool manager actors. Each call is
// a fixed number of message round trips whatever the number of requests:
//   match_lengths     MatchPrefix (no lock)
//   admit             AllocReqSlots (+1 retry with what is free), MatchPrefix (lock)
//   extend            AllocTokens; if short: Evict (only if it covers the
//                     shortfall), Free, AllocTokens
//   cache_unfinished  CacheReqs(unfinished), Free
//   finish / abort    CacheReqs(finished / release), Free
//   truncate          Free (the pool's page size asked once, PoolStats)
// Runs on a blocking actor (a scoped_actor or the scheduler's own); every
// request has a timeout, and an unreachable or failing manager throws
// std::runtime_error naming it.

#include <caf/actor.hpp>
#include <caf/blocking_actor.hpp>
#include <chrono>
#include <utility>

#include "actors/actor_worker.hpp"
#include "actors/wire.hpp"
#include "scheduler/kv_service.hpp"

namespace actorlm {

class ActorKvService final : public KvService {
 public:
  ActorKvService(caf::blocking_actor* self, caf::actor pool, caf::actor radix,
                 std::chrono::milliseconds timeout = std::chrono::seconds(30));

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
  void record_evictions(bool on) override { record_evictions_ = on; }
  std::vector<RadixCache::EvictedPath> take_evicted() override { return std::exchange(evicted_, {}); }

  int64_t round_trips() const { return round_trips_; }

 private:
  std::vector<uint8_t> ask(const caf::actor& to, const char* who, std::vector<uint8_t> bytes);
  void free_rows(std::vector<int32_t> rows, std::vector<int32_t> slots);
  void cache(std::span<RequestKv* const> reqs, int mode);

  caf::blocking_actor* self_;
  caf::actor pool_, radix_;
  std::chrono::milliseconds timeout_;
  int64_t round_trips_ = 0;
  bool record_evictions_ = false;
  std::vector<RadixCache::EvictedPath> evicted_;
  int32_t page_size_ = 0;  // the pool's, once truncate has asked
};

}  // namespace actorlm
