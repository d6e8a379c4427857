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
// Stores run on an I/O thread of the tiers' own (HiCache off the critical
// path): the scheduler's thread only reads the rows out of the pool, which
// it must do before they are reused, and queues the rest (encoding for the
// host tier, files for the disk). A block still queued is served from the
// queue, so a load never misses what was just written. A request that
// waits for admission has its blocks read ahead on the I/O thread (prefetch:
// disk files read, host blocks decoded), so its admission only takes them;
// what has not arrived by then is read on the caller's thread. Whether a
// request waits for its read-ahead is the prefetch policy's call.
//
// Pure C++. One caller thread (the scheduler's) plus the I/O thread; the
// figures (host_stats, disk_stats) may be read from any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kvstore/kv_disk_store.hpp"
#include "kvstore/kv_host_store.hpp"
#include "kvstore/radix_cache.hpp"
#include "scheduler/worker.hpp"

namespace actorlm {

enum class HiCacheWritePolicy { write_through, write_back };

const char* write_policy_name(HiCacheWritePolicy p);
std::optional<HiCacheWritePolicy> write_policy_from(std::string_view name);

// Whether a waiting request's read-ahead must be done before it is admitted
// (--hicache-prefetch-policy, SGLang's names):
//   best_effort    admitted as soon as there is room; blocks not read ahead
//                  by then are read at admission, on the scheduler's thread
//   wait_complete  not admitted while its read-ahead is under way
//   timeout        as wait_complete for at most --hicache-prefetch-timeout-ms,
//                  then as best_effort
enum class HiCachePrefetchPolicy { best_effort, wait_complete, timeout };

const char* prefetch_policy_name(HiCachePrefetchPolicy p);
std::optional<HiCachePrefetchPolicy> prefetch_policy_from(std::string_view name);

enum class KvTier { host, disk };

class KvTiers {
 public:
  // At least one of host and disk; both (when both are given) with the same
  // layout. Throws std::invalid_argument otherwise.
  KvTiers(std::shared_ptr<KvHostStore> host, std::shared_ptr<KvDiskStore> disk, HiCacheWritePolicy policy);
  // Finishes every queued store (a restart finds on disk what this run
  // wrote), then stops the I/O thread.
  ~KvTiers();
  KvTiers(const KvTiers&) = delete;
  KvTiers& operator=(const KvTiers&) = delete;

  const KvBlockLayout& layout() const;
  int32_t block_tokens() const { return layout().block_tokens; }
  HiCacheWritePolicy policy() const { return policy_; }
  bool has_host() const { return host_ != nullptr; }
  bool has_disk() const { return disk_ != nullptr; }
  // Each tier's figures now (nullopt: no such tier). Any thread.
  std::optional<KvHostStats> host_stats() const;
  std::optional<KvDiskStats> disk_stats() const;

  // Waits until every queued store is done.
  void drain() const;
  // Blocks queued for the I/O thread and not yet stored.
  size_t pending_blocks() const;
  // Tests: while paused the I/O thread starts no store (the destructor
  // unpauses). And the threads that have run stores so far.
  void pause_io(bool paused);
  std::set<std::thread::id> store_threads() const;

  struct Loaded {
    std::vector<uint8_t> data;  // the whole block, the pool's layout
    KvTier tier;
  };
  // Every call names a prompt with the lineage of its KV (kvstore/kv_block.hpp:
  // 0 for the base model, else the LoRA adapter's): a prompt's blocks under
  // one lineage are never served to another.

  // Block `block` of `prompt` from the store queue, the prefetched blocks or
  // the fastest tier that has it (a damaged disk block is refused and
  // counted there); nullopt when none does. A queued block counts as its
  // first tier's, a prefetched one as the disk's.
  std::optional<Loaded> load(std::span<const int32_t> prompt, int32_t block, uint64_t lineage = 0);

  // A request that waits for admission: the I/O thread reads the blocks of
  // `prompt` from `from_block` on (up to the one before its last token, as a
  // load would, and only while some tier has the next) into memory, in the
  // pool's layout: a host block decoded, a disk block's file read. Its
  // admission then takes them instead of reading a tier; whatever has not
  // arrived by then is loaded as before. Blocks the store queue has are
  // skipped. Prefetched blocks wait, up to prefetch_capacity bytes (the
  // oldest go first), until a load takes them.
  void prefetch(std::span<const int32_t> prompt, int32_t from_block, uint64_t lineage = 0);
  static constexpr int64_t prefetch_capacity = int64_t{256} << 20;
  // Prefetched blocks waiting for their load.
  size_t prefetched_blocks() const;
  // A prefetch of `prompt` is queued or under way.
  bool prefetching(std::span<const int32_t> prompt, uint64_t lineage = 0) const;
  // `prompt` was admitted and has loaded what it could: its prefetch stops
  // and the blocks read for it that it did not take are let go (the pool
  // has them by now, or had no room for them).
  void drop_prefetch(std::span<const int32_t> prompt, uint64_t lineage = 0);
  // Returns once a prefetch ends, or after `at_most`: a caller with nothing
  // else to do than wait for one sleeps here instead of spinning.
  void wait_prefetch(std::chrono::milliseconds at_most) const;
  // The threads that have read a tier for a load or a prefetch (a host
  // block decoded, a disk file read): tests check which thread does it.
  std::set<std::thread::id> read_threads() const;

  // write_through: the whole blocks of `prompt` (rows: its KV, one per
  // token, at least the blocks' length) that a tier lacks are read now and
  // queued for it.
  void after_prefill(Worker& worker, std::span<const int32_t> prompt, std::span<const int32_t> rows,
                     uint64_t lineage = 0);
  // write_back: the whole blocks the evicted nodes end in, read now and
  // queued to go down. Call before the worker writes to any freed row.
  // lineages: each path's (empty: all the base model's).
  void after_eviction(Worker& worker, std::span<const RadixCache::EvictedPath> paths,
                      std::span<const uint64_t> lineages = {});

  // Each tier's invariant (KvHostStore::check, KvDiskStore::check), once
  // the queue is drained; empty when both hold.
  std::string check() const;

 private:
  // The blocks of one prompt (or evicted path) read out of the pool, on
  // their way down.
  enum class JobKind { write_through, write_back, prefetch };
  struct Job {
    JobKind kind;
    bool disk_ok = true;  // write_through: a failed disk write stops its children
    std::vector<int32_t> prompt;  // whole blocks
    uint64_t lineage;
    std::vector<int32_t> blocks;               // prefetch: from its first on
    std::vector<std::vector<uint8_t>> data;    // per block (none for prefetch)
    std::vector<std::pair<bool, bool>> to;     // write_through, per block: (host tier, disk tier)
    bool dropped = false;                      // prefetch: no longer wanted (drop_prefetch)
  };
  void queue(Job job);
  void io_loop();
  // Block i of the job: its stores, or its read ahead. Under mu_, on the I/O
  // thread; false when the job stops there (a prefetch whose chain ended).
  bool run_block(Job& job, size_t i);
  // Copies the tiers' figures where host_stats/disk_stats read them; under mu_.
  void refresh_stats();
  // mu_ for a caller of the tiers (the scheduler's thread): the I/O thread
  // steps aside between blocks while one waits, so no caller waits for more
  // than the block being stored or read.
  class Turn {
   public:
    explicit Turn(const KvTiers& t);
    ~Turn();
    std::unique_lock<std::mutex>& lock() { return lock_; }

   private:
    const KvTiers& t_;
    std::unique_lock<std::mutex> lock_;
  };
  // A queued copy of block `block` of `prompt`; under mu_.
  const Job* queued(std::span<const int32_t> prompt, int32_t block, uint64_t lineage, size_t* at) const;

  // Reads the rows of whole blocks, one block per worker call: the answer
  // is then the block as the tiers keep it, with no copy to cut it out of a
  // larger read (a third less time on the scheduler's thread, measured by
  // bench/kv_tiers_bench), and one answer stays a block's size, well under
  // the largest message the worker actor may send.
  std::vector<std::vector<uint8_t>> read_blocks(Worker& worker, std::span<const int32_t> rows,
                                                std::span<const int32_t> blocks) const;
  // Writes what the host tier let go to the disk, each after the parents
  // the disk lacks (taken from the host tier or from the same batch).
  void demote(std::vector<KvDemotedBlock> blocks);

  std::shared_ptr<KvHostStore> host_;
  std::shared_ptr<KvDiskStore> disk_;
  HiCacheWritePolicy policy_;

  // Guards the tiers, the queue and what the I/O thread records. A store
  // runs under it, so a load waits for at most one job's stores.
  mutable std::mutex mu_;
  mutable std::condition_variable wake_;  // a job queued, pause lifted, stop
  mutable std::condition_variable idle_;  // the queue ran empty
  mutable std::condition_variable step_aside_;  // no caller waits for mu_ any more
  mutable std::condition_variable prefetched_;  // a prefetch job ended
  mutable std::atomic<int> callers_{0};         // callers waiting for mu_
  // The figures, apart from mu_, so that a reader (every step's stats board)
  // never waits for a store.
  mutable std::mutex stats_mu_;
  std::optional<KvHostStats> host_figures_;
  std::optional<KvDiskStats> disk_figures_;
  std::deque<Job> jobs_;
  size_t pending_blocks_ = 0;
  bool paused_ = false, stopping_ = false;
  std::set<std::thread::id> store_threads_;
  mutable std::set<std::thread::id> read_threads_;
  // Prefetched blocks by lineage and the prompt up to their end, oldest
  // first in staged_order_.
  struct Staged {
    std::vector<uint8_t> data;
    KvTier tier;
  };
  using StagedKey = std::pair<uint64_t, std::vector<int32_t>>;
  std::map<StagedKey, Staged> staged_;
  std::deque<StagedKey> staged_order_;
  int64_t staged_bytes_ = 0;
  std::thread io_;  // last: started once everything above exists
};

}  // namespace actorlm
