#pragma once
// RadixAttention's prefix cache: a radix tree from token ids to the KV rows
// that hold their keys and values, shared by every request with that prefix.
//
// - Keys are token ids, values KV rows, always the same length per node.
//   Nodes are split only at page boundaries; a child is found by its first
//   page of tokens. match_prefix and insert work on whole pages.
// - The tree holds indices only. It never frees rows itself: evict() and the
//   cache_*_req operations RETURN the rows the caller must give back to the
//   TokenToKVPoolAllocator (in the actor system, the radix manager sends them
//   to the memory-pool manager).
// - lock_ref counts the requests using a node; inc/dec walk to the root.
//   Every row in the tree is either evictable (lock_ref == 0) or protected.
// - LRU uses a logical clock (one tick per match/insert), so runs repeat
//   exactly for the same sequence of calls.
// - Node ids are stable across splits (a split creates the new *upper* node;
//   the lower one keeps its id) and carry a generation, so an id from a node
//   that was since evicted is detected instead of aliasing a new node.
//
// Owned by the radix-cache manager (single writer); not thread-safe.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace actorlm {

using NodeId = uint64_t;

class RadixCache {
 public:
  static constexpr NodeId root_id = 0;

  struct MatchResult {
    std::vector<int32_t> indices;  // KV rows of the matched prefix (a multiple of page_size)
    NodeId last_node = root_id;    // deepest node of the match; lock it to keep the prefix
  };

  // What a cache_*_req call leaves the caller to do.
  struct CacheResult {
    std::vector<int32_t> to_free;             // rows to return to the allocator
    int32_t new_prefix_len = 0;               // unfinished: tokens now owned by the tree
    std::vector<int32_t> new_prefix_indices;  // unfinished: the tree's rows for them
    NodeId new_last_node = root_id;           // unfinished: now locked for the request
  };

  // disabled: no reuse — match finds nothing, insert stores nothing, and
  // cache_finished_req returns every row to be freed.
  explicit RadixCache(int32_t page_size, bool disabled = false);

  int32_t page_size() const { return page_size_; }
  bool disabled() const { return disabled_; }

  // Longest cached prefix of tokens, truncated to whole pages. Splits the
  // last node when the match ends inside it; refreshes access times.
  MatchResult match_prefix(std::span<const int32_t> tokens);

  // Adds (tokens -> values); both the same length, a multiple of page_size.
  // Returns how many leading tokens were already cached: the caller's
  // values[old_prefix, returned) are duplicates it should free. New nodes
  // are unlocked (evictable).
  int32_t insert(std::span<const int32_t> tokens, std::span<const int32_t> values);

  // Lock / unlock the path root..node. Return the change in evictable size.
  // dec on an unlocked path throws KvStoreError and changes nothing.
  int64_t inc_lock_ref(NodeId node);
  int64_t dec_lock_ref(NodeId node);

  // Removes least-recently-used unlocked leaves until at least num_tokens
  // rows are freed or nothing evictable is left. Returns the freed rows.
  std::vector<int32_t> evict(int64_t num_tokens);

  // A request (holding rows kv for tokens, the first prefix_len of them from
  // the tree, locked through last_node) finished or is being retracted:
  // insert its whole pages, return duplicates and its unaligned tail, unlock.
  CacheResult cache_finished_req(std::span<const int32_t> tokens, std::span<const int32_t> kv,
                                 int32_t prefix_len, NodeId last_node);
  // A request continues (between prefill chunks): insert its whole pages,
  // return duplicates, move its lock to the new deepest node. The caller
  // rewrites req_to_token[prefix_len, new_prefix_len) with new_prefix_indices
  // and keeps owning its unaligned tail.
  CacheResult cache_unfinished_req(std::span<const int32_t> tokens, std::span<const int32_t> kv,
                                   int32_t prefix_len, NodeId last_node);
  // A request is aborted: unlock its prefix and return the rows it owns
  // privately (kv[prefix_len, end)); nothing is inserted.
  std::vector<int32_t> release_req(std::span<const int32_t> kv, int32_t prefix_len,
                                   NodeId last_node);

  int64_t evictable_size() const { return evictable_size_; }
  int64_t protected_size() const { return protected_size_; }
  int64_t total_size() const { return evictable_size_ + protected_size_; }
  size_t node_count() const { return nodes_.size() - free_nodes_.size(); }
  bool valid(NodeId id) const;
  int32_t lock_ref(NodeId id) const;
  // Every row held by the tree (for integrity checks in tests).
  std::vector<int32_t> all_rows() const;

  // Empty when every structural invariant holds, else the first violation:
  // key/value lengths agree, children are keyed by their first page, sizes
  // add up, lock refs are non-negative and never exceed the parent's, no row
  // appears twice.
  std::string check_integrity() const;

 private:
  struct PageHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using ChildMap = std::unordered_map<std::string, int32_t, PageHash, std::equal_to<>>;

  struct Node {
    std::vector<int32_t> key;
    std::vector<int32_t> value;
    int32_t parent = -1;
    ChildMap children;
    int32_t lock_ref = 0;
    uint64_t last_access = 0;
    uint32_t generation = 0;
    bool alive = false;
  };

  std::string_view page_key(std::span<const int32_t> tokens) const;
  int32_t find_child(int32_t node, std::span<const int32_t> tokens) const;
  size_t match_len(const std::vector<int32_t>& key, std::span<const int32_t> tokens) const;
  int32_t new_node();
  int32_t split(int32_t child, size_t at);
  void delete_leaf(int32_t node);
  int32_t index_of(NodeId id) const;  // throws for stale or unknown ids
  NodeId id_of(int32_t index) const;
  void check_aligned(std::span<const int32_t> tokens, std::span<const int32_t> values,
                     const char* what) const;

  int32_t page_size_;
  bool disabled_;
  std::vector<Node> nodes_;  // [0] is the root
  std::vector<int32_t> free_nodes_;
  uint64_t clock_ = 0;
  int64_t evictable_size_ = 0;
  int64_t protected_size_ = 0;
};

}  // namespace actorlm
