#pragma once
// The radix-cache manager: owns the RadixCache (indices only). Answers
// (kv_atom, WireMessage) for MatchPrefix, CacheReqs and Evict. Rows it frees
// (evictions, duplicates, tails) come back in the reply for the caller to
// return to the memory-pool manager in the same step.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "kvstore/radix_cache.hpp"

namespace actorlm {

caf::actor spawn_radix_manager(caf::actor_system& system, int32_t page_size, bool disabled,
                               EvictionPolicy policy = EvictionPolicy::lru);

}  // namespace actorlm
