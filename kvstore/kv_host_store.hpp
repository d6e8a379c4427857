#pragma once
// The host-memory tier of the hierarchical KV cache (the seeds' L2, SGLang's
// HostKVCache): prompt KV blocks kept in RAM after the pool (L1) let them go,
// optionally in a smaller element type so more tokens fit.
//
// Blocks are the ones of kvstore/kv_block.hpp, keyed the same way as the
// disk tier's, so a prompt is matched tier by tier, block by block, and a
// block pushed out of this tier can be handed down to the disk as it is.
// Unlike the disk tier, a block does not need its parent here: write-back
// stores what the radix cache evicts, children before their parents.
//
// Each entry keeps the whole prompt up to its block's end. That is what a
// block pushed out must take to the disk tier (whose keys chain from the
// root), and it lets a lookup compare every token, so a hash collision is
// a miss, never someone else's KV. Its bytes are counted against capacity.
//
// Element types (--hicache-dtype):
//   same  the pool's bytes, copied: lossless
//   f16   each element rounded to IEEE half (a float32 pool's KV in half the
//         room; the same as `same` for a half pool; refused for a bf16 pool,
//         where it saves nothing)
//   q8_0  groups of 32 elements as one half scale and 32 int8 (~3.8x smaller
//         than float32); needs each token's K (and V) to be a multiple of 32
//         elements
// Decoding always gives back the pool's layout and element type.
//
// Capacity is in bytes; the least recently used block goes first (the
// deepest on a tie). Nothing here is ever locked: a load copies the block
// out, so every stored byte is evictable and the tier's invariant is
// free + evictable == capacity. One owner: not thread-safe.
//
// Plain LRU thrashes when prompts come back in a cycle longer than the tier
// holds (round-robin over more conversations than fit): each block is let
// go just before it is asked for again, and nothing ever hits. So the tier
// remembers the keys it let go for room (ghosts, about twice what it holds),
// and a block that comes back as a ghost, when the tier is full and the
// block it would push out has proven itself (loaded since it was stored, or
// admitted as a ghost itself), is refused instead: the blocks already here
// stay and keep hitting, and the tier serves the share of the cycle it
// holds rather than none of it. A block never seen before is admitted as
// under LRU, so a stream of new prompts still replaces old ones.

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "kvstore/kv_block.hpp"

namespace actorlm {

enum class KvHostDtype { same, f16, q8_0 };
enum class KvElement { f32, f16, bf16 };  // a pool's element types

const char* kv_host_dtype_name(KvHostDtype d);
std::optional<KvHostDtype> kv_host_dtype_from(std::string_view name);

struct KvHostStats {
  int64_t blocks = 0, bytes = 0, capacity_bytes = 0;
  int64_t stored = 0;   // blocks stored
  int64_t loaded = 0;   // blocks copied back out
  int64_t evicted = 0;  // blocks let go for room
  int64_t refused = 0;  // blocks not admitted: back after being let go, into a full tier of proven ones
};

// A block this tier let go to make room, for the tier below it.
struct KvDemotedBlock {
  std::vector<int32_t> prompt;  // the prompt from its start to the block's end
  int32_t block = 0;
  std::vector<uint8_t> data;    // decoded: the pool's layout and element type
  uint64_t lineage = 0;         // kvstore/kv_block.hpp
};

class KvHostStore {
 public:
  // Throws std::invalid_argument for a layout the element type cannot encode
  // or a capacity below one block.
  KvHostStore(KvBlockLayout layout, int64_t capacity_bytes, KvHostDtype dtype);

  const KvBlockLayout& layout() const { return layout_; }
  KvHostDtype dtype() const { return dtype_; }
  const KvHostStats& stats() const { return stats_; }
  // One block's data as stored here (a block at depth d also counts the
  // 4 * block_tokens * (d + 1) bytes of its prompt).
  int64_t encoded_block_bytes() const { return encoded_bytes_; }

  // Every call names a block by its prompt, its index and the lineage of
  // its KV (kvstore/kv_block.hpp: 0 for the base model); blocks of two
  // lineages are two blocks, whatever their tokens.

  // Whether block `block` of `prompt` is here (every token up to its end
  // compared, and the lineage).
  bool contains(std::span<const int32_t> prompt, int32_t block, uint64_t lineage = 0) const {
    return held(prompt, block, lineage).has_value();
  }

  // Block `block` of `prompt`, decoded to layout().block_bytes(); nullopt
  // when it is not here. load() marks it used; peek() changes nothing.
  std::optional<std::vector<uint8_t>> load(std::span<const int32_t> prompt, int32_t block, uint64_t lineage = 0);
  std::optional<std::vector<uint8_t>> peek(std::span<const int32_t> prompt, int32_t block, uint64_t lineage = 0) const;

  // Stores block `block` of `prompt` (data: layout().block_bytes(), the
  // pool's layout). false when it is here already, the sizes are wrong or
  // it is refused (see above). Blocks let go to make room, and a refused
  // block, are appended, decoded, to *demoted when it is given (write-back
  // hands them to the disk tier), else dropped.
  bool store(std::span<const int32_t> prompt, int32_t block, std::span<const uint8_t> data,
             std::vector<KvDemotedBlock>* demoted = nullptr, uint64_t lineage = 0);

  // Lets every block go (counted as evicted); returns how many.
  int64_t clear();

  // The tier's invariant, for the engine's self-check: free + evictable ==
  // capacity in bytes (free = capacity - bytes held, evictable = every
  // stored byte, as nothing is locked), the counted blocks and bytes are the
  // index's, and the LRU order lists every block once. Empty when it holds.
  std::string check() const;

 private:
  struct Entry {
    std::vector<int32_t> prompt;  // tokens from the start to the block's end
    uint64_t lineage = 0;
    int32_t depth = 0;
    std::vector<uint8_t> data;    // encoded
    int64_t bytes = 0;            // counted against capacity
    uint64_t last_use = 0;
    bool proven = false;          // loaded since stored, or admitted as a ghost
  };
  // (last use, -depth, key): the front is the block to let go first.
  using LruKey = std::tuple<uint64_t, int32_t, uint64_t>;

  // The key of block `block` of `prompt` when it is held under that very
  // prompt.
  std::optional<uint64_t> held(std::span<const int32_t> prompt, int32_t block, uint64_t lineage) const;
  std::vector<uint8_t> encode(std::span<const uint8_t> data) const;
  std::vector<uint8_t> decode(std::span<const uint8_t> data) const;
  void touch(uint64_t key, Entry& e);
  // `for_room`: let go to make room, so remembered as a ghost.
  void let_go(std::map<uint64_t, Entry>::iterator it, std::vector<KvDemotedBlock>* demoted, bool for_room);

  KvBlockLayout layout_;
  KvHostDtype dtype_;
  KvElement elem_ = KvElement::f32;  // the pool's element type
  size_t elem_bytes_ = 4;
  int64_t encoded_bytes_ = 0;
  std::map<uint64_t, Entry> index_;
  std::set<LruKey> lru_;
  // Keys let go for room, oldest first, at most max_ghosts_ of them.
  std::deque<uint64_t> ghost_order_;
  std::unordered_set<uint64_t> ghosts_;
  size_t max_ghosts_ = 0;
  uint64_t clock_ = 0;
  KvHostStats stats_;
};

}  // namespace actorlm
