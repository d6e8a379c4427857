#pragma once
// The tiers of the KV cache below the pool (HiCache's L2 and L3): the host
// tier (KvHostStore, RAM, maybe compressed) and the disk tier (KvDiskStore),
// fed and read through the worker's KV row copies. The scheduler owns one
// and asks it, block by block, for what an admitted prompt needs beyond its
// cached prefix.
//
// Write policy (--hicache-write-policy, SGLang's names):
//   write_through  once a prefill ends, the prompt's whole blocks are copied
//                  to every tier that lacks them. What the host tier lets go
//                  is already on disk.
//   write_back     nothing is copied until the radix cache evicts it: the
//                  evicted nodes' whole blocks go to the host tier (to the
//                  disk when there is no host tier), and what the host tier
//                  lets go goes to the disk, parents first.
// A block loaded from the disk is not copied to the host tier on the way:
// that could push out the very blocks the rest of the prompt needs. It
// reaches the host tier as any other KV does, after the prefill
// (write-through) or when the pool evicts it (write-back).
//
// Pure C++; the scheduler's thread only.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/kv_disk_store.hpp"
#include "kvstore/kv_host_store.hpp"
#include "kvstore/radix_cache.hpp"
#include "scheduler/worker.hpp"

namespace actorlm {

enum class HiCacheWritePolicy { write_through, write_back };

const char* write_policy_name(HiCacheWritePolicy p);
std::optional<HiCacheWritePolicy> write_policy_from(std::string_view name);

enum class KvTier { host, disk };

class KvTiers {
 public:
  // At least one of host and disk; both (when both are given) with the same
  // layout. Throws std::invalid_argument otherwise. max_read_bytes: the most
  // KV one worker call copies out (several blocks per call, each answer well
  // under the largest message the worker actor may send).
  KvTiers(std::shared_ptr<KvHostStore> host, std::shared_ptr<KvDiskStore> disk, HiCacheWritePolicy policy,
          int64_t max_read_bytes = 16 << 20);

  const KvBlockLayout& layout() const;
  int32_t block_tokens() const { return layout().block_tokens; }
  HiCacheWritePolicy policy() const { return policy_; }
  KvHostStore* host() const { return host_.get(); }
  KvDiskStore* disk() const { return disk_.get(); }

  struct Loaded {
    std::vector<uint8_t> data;  // the whole block, the pool's layout
    KvTier tier;
  };
  // Block `block` of `prompt` from the fastest tier that has it (a damaged
  // disk block is refused and counted there); nullopt when none does.
  std::optional<Loaded> load(std::span<const int32_t> prompt, int32_t block);

  // write_through: the whole blocks of `prompt` (rows: its KV, one per
  // token, at least the blocks' length) that a tier lacks are copied to it.
  void after_prefill(Worker& worker, std::span<const int32_t> prompt, std::span<const int32_t> rows);
  // write_back: the whole blocks the evicted nodes end in, copied down.
  // Call before the worker writes to any freed row.
  void after_eviction(Worker& worker, std::span<const RadixCache::EvictedPath> paths);

  // Each tier's invariant (KvHostStore::check, KvDiskStore::check); empty
  // when both hold.
  std::string check() const;

 private:
  // Reads the rows of whole blocks, several per worker call (up to
  // max_read_bytes_), and splits the answers into one buffer per block.
  std::vector<std::vector<uint8_t>> read_blocks(Worker& worker, std::span<const int32_t> rows,
                                                std::span<const int32_t> blocks) const;
  // Writes what the host tier let go to the disk, each after the parents
  // the disk lacks (taken from the host tier or from the same batch).
  void demote(std::vector<KvDemotedBlock> blocks);

  std::shared_ptr<KvHostStore> host_;
  std::shared_ptr<KvDiskStore> disk_;
  HiCacheWritePolicy policy_;
  int64_t max_read_bytes_;
};

}  // namespace actorlm
