#pragma once
// The memory-pool manager: owns the request-slot free list and the paged
// TokenToKVPoolAllocator (bookkeeping only; the KV tensors live in the
// worker). Answers (kv_atom, WireMessage) for AllocReqSlots, AllocTokens,
// Free and PoolStatsRequest with the matching reply message. Misuse (double
// free, bad rows) is an error reply; the pools are unchanged.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "kvstore/kv_store.hpp"

namespace actorlm {

caf::actor spawn_pool_manager(caf::actor_system& system, const KvStoreConfig& config);

}  // namespace actorlm
