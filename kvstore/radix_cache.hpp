#pragma once
// RadixAttention's prefix cache: a radix tree from token ids to the KV rows
// that hold their keys and values, shared by every request with that prefix.
//
// - Keys are token ids, values KV rows, always the same length per node.
//   Nodes are split only at page boundaries; a child is found by its first
//   page of tokens (page_size tokens). match_prefix and insert work on whole
//   pages, so every node's rows are whole pages of the allocator.
// - The tree holds indices only. It never frees rows itself: evict() and the
//   cache_*_req operations RETURN the rows the caller must give back to the
//   TokenToKVPoolAllocator (in the actor system, the radix manager sends them
//   to the memory-pool manager; in one process, KvStore does it).
// - lock_ref counts the requests using a node; inc/dec walk to the root.
//   Every row in the tree is either evictable (its node's lock_ref == 0) or
//   protected (lock_ref > 0): total_size() == evictable + protected.
// - Eviction takes unlocked leaves in the order of an EvictionPolicy: least
//   recently used (a logical clock, one tick per match/insert, never wall
//   time), fewest hits, or lowest priority, each then by age. Ties are broken
//   by node index, so the same sequence of calls always evicts the same rows
//   in the same order. A parent is never older, less hit or of lower priority
//   than its children (every match or insert through a child passes it).
// - Node ids are uint64 values that can travel in messages. They are stable
//   across splits (a split creates the new *upper* node; the lower one keeps
//   its id, so a request's last_node still names the end of its prefix) and
//   carry a generation, so an id of a node that was since evicted is reported
//   as stale instead of aliasing a new node that reuses its storage.
// - Request-level operations (cache_finished_req, cache_unfinished_req,
//   release_req) do the tree's half of SGLang's cache_*_req and return what
//   the allocator and the request table must do; KvStore composes them with
//   the two pools. They check the request's claimed prefix (prefix_len,
//   last_node, the tokens and rows) against the tree before changing
//   anything, so a wrong message is an error, never a corrupted tree.
//
// Owned by the radix-cache manager (single writer); not thread-safe.
// Errors: KvStoreError (kvstore/kv_error.hpp) with a message naming the fault.

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace actorlm {

using NodeId = uint64_t;

// Which unlocked leaf evict() takes first (--radix-eviction-policy).
enum class EvictionPolicy : uint8_t {
  lru,       // the least recently used
  lfu,       // the fewest admitted requests matched through it, then lru
  priority,  // the lowest priority of any request that used it, then lru
};
std::optional<EvictionPolicy> parse_eviction_policy(std::string_view name);

// Who matches a prefix. A request being admitted counts as a hit on every
// node of its path (lfu) and lends the path its priority (priority
// eviction); a probe (the scheduler ranking its queue, a router's mirror)
// only refreshes access times, or ranking a queue would count as use.
struct PrefixUse {
  int64_t priority = 0;  // larger is kept longer
  bool hit = false;
};

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

  // A node as seen from outside, by id.
  struct NodeInfo {
    NodeId id = root_id;
    NodeId parent = root_id;  // root's parent is root
    int32_t key_len = 0;      // tokens (== rows) held by this node
    int32_t prefix_len = 0;   // tokens from the root to the end of this node
    int32_t lock_ref = 0;
    uint64_t last_access = 0;  // logical clock
    int32_t num_children = 0;
    uint64_t hits = 0;         // admitted requests matched through it
    int64_t priority = 0;      // the highest priority of a request that used it
  };

  using Use = PrefixUse;

  // page_size >= 1. disabled: no reuse — match finds nothing, insert stores
  // nothing, locks are no-ops, and cache_finished_req returns every row.
  explicit RadixCache(int32_t page_size, bool disabled = false, EvictionPolicy policy = EvictionPolicy::lru);

  int32_t page_size() const { return page_size_; }
  bool disabled() const { return disabled_; }

  // Longest cached prefix of tokens, truncated to whole pages. Splits the
  // last node when the match ends inside it; refreshes access times along
  // the path (and, for a hit, counts it and raises the path's priority).
  // Does not lock: call inc_lock_ref(last_node) to keep the rows.
  MatchResult match_prefix(std::span<const int32_t> tokens, Use use = {});

  // Adds (tokens -> values); both the same length, a multiple of page_size
  // (else KvStoreError). Returns how many leading tokens were already cached:
  // the tree keeps its own rows for them, so the caller's
  // values[its_prefix_len, returned) are duplicates it must free, and only
  // values[returned, end) now belong to the tree. New nodes are unlocked
  // (evictable). The path's priority is raised to `priority`; a new node
  // starts at it.
  int32_t insert(std::span<const int32_t> tokens, std::span<const int32_t> values, int64_t priority = 0);

  // Lock / unlock the path root..node. Return the change in evictable size.
  // A stale id throws; dec on a path that is not locked throws. Both change
  // nothing when they throw.
  int64_t inc_lock_ref(NodeId node);
  int64_t dec_lock_ref(NodeId node);

  // A node eviction let go of, for a tier below the pool (write-back): the
  // whole path root..node, tokens and rows, and where the node began. The
  // rows above `start` are its ancestors': still cached, or evicted later in
  // the same call (children go before their parents). Every row's data is
  // intact until the caller hands the freed rows out again.
  struct EvictedPath {
    std::vector<int32_t> tokens;
    std::vector<int32_t> rows;
    int32_t start = 0;
  };

  // Removes unlocked leaves in the policy's order (a parent left childless
  // becomes a candidate) until at least num_tokens rows are freed or nothing
  // evictable is left. Returns the freed rows, whole nodes at a time; the
  // caller frees them through the allocator. Locked paths are never touched.
  // With `evicted`, each removed node's path is appended to it.
  std::vector<int32_t> evict(int64_t num_tokens, std::vector<EvictedPath>* evicted = nullptr);

  // A request that holds rows kv for tokens (same length; the first
  // prefix_len of them the tree's own rows on the path root..last_node,
  // locked by this request) finished or is being retracted: insert its whole
  // pages, unlock. to_free = its duplicates kv[prefix_len, cached) plus its
  // unaligned tail kv[aligned, end) — everything it owned that the tree did
  // not take. Disabled: to_free = all of kv. The caller also frees the
  // request's slot. `priority` is the request's (see insert).
  CacheResult cache_finished_req(std::span<const int32_t> tokens, std::span<const int32_t> kv,
                                 int32_t prefix_len, NodeId last_node, int64_t priority = 0);
  // A request continues (between prefill chunks): insert its whole pages,
  // return duplicates kv[prefix_len, cached) in to_free, move its lock to the
  // new deepest node. The caller rewrites its rows (and req_to_token) for
  // [prefix_len, new_prefix_len) with new_prefix_indices and keeps owning its
  // unaligned tail. Disabled: nothing changes.
  CacheResult cache_unfinished_req(std::span<const int32_t> tokens, std::span<const int32_t> kv,
                                   int32_t prefix_len, NodeId last_node, int64_t priority = 0);
  // A request is aborted: unlock its prefix and return the rows it owns
  // privately (kv[prefix_len, end)); nothing is inserted.
  std::vector<int32_t> release_req(std::span<const int32_t> kv, int32_t prefix_len,
                                   NodeId last_node);

  // Empty when the request's claimed prefix is what the tree holds:
  // prefix_len is page-aligned and within tokens/kv, last_node is a live node
  // exactly prefix_len tokens deep, whose path spells tokens[0, prefix_len)
  // with rows kv[0, prefix_len), locked all the way up (unless it is the
  // root). Otherwise what is wrong. Pass an empty tokens span to skip the
  // token comparison (release_req has no tokens).
  std::string check_request_prefix(std::span<const int32_t> tokens, std::span<const int32_t> kv,
                                   int32_t prefix_len, NodeId last_node) const;

  // Empty when every node's lock_ref is exactly the number of holders whose
  // path root..holder runs through it (holders: the last_node of every
  // request that holds a lock; root_id holds nothing). Pool accounting alone
  // cannot see a lock that outlived its request — the rows just stay
  // "protected" — so this is what catches a missing or doubled unlock at the
  // step it happens. Otherwise names the first node that disagrees.
  std::string check_lock_holders(std::span<const NodeId> holders) const;

  int64_t evictable_size() const { return evictable_size_; }
  int64_t protected_size() const { return protected_size_; }
  int64_t total_size() const { return evictable_size_ + protected_size_; }
  size_t node_count() const { return nodes_.size() - free_nodes_.size(); }  // incl. root
  uint64_t clock() const { return clock_; }

  // Lookups by id. valid() never throws; the others throw for a stale id.
  bool valid(NodeId id) const;
  int32_t lock_ref(NodeId id) const;
  NodeInfo node_info(NodeId id) const;
  // The rows of the path root..node (what match_prefix returned for it).
  std::vector<int32_t> path_values(NodeId id) const;
  // Every row held by the tree (for integrity checks in tests).
  std::vector<int32_t> all_rows() const;

  // Empty when every structural invariant holds, else the first violation:
  // key and value lengths agree, keys are whole pages, children are keyed by
  // their first page, parent links agree, sizes add up, lock refs are
  // non-negative and never exceed the parent's, no parent is older, less hit
  // or of lower priority than a child, no row appears twice, and the
  // eviction list holds exactly the unlocked leaves under their current keys.
  std::string check_integrity() const;

 private:
  struct PageHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Child lookup by the raw bytes of its first page: one hash of page_size
  // ints, no per-token nodes. Strings of <= 15 bytes (page_size <= 3) stay
  // inline.
  using ChildMap = std::unordered_map<std::string, int32_t, PageHash, std::equal_to<>>;
  // (the policy's measure, last access, node index): evicted smallest first.
  using EvictKey = std::tuple<int64_t, uint64_t, int32_t>;

  struct Node {
    std::vector<int32_t> key;
    std::vector<int32_t> value;
    int32_t parent = -1;
    ChildMap children;
    int32_t lock_ref = 0;
    uint64_t last_access = 0;
    uint64_t hits = 0;
    int64_t priority = 0;
    uint32_t generation = 0;
    bool alive = false;
    bool listed = false;  // in leaves_, under listed_key
    EvictKey listed_key{};
  };

  std::string_view page_key(std::span<const int32_t> tokens) const;
  int32_t find_child(int32_t node, std::span<const int32_t> tokens) const;
  size_t match_len(const std::vector<int32_t>& key, std::span<const int32_t> tokens) const;
  int32_t new_node();
  int32_t split(int32_t child, size_t at);
  void delete_leaf(int32_t node);
  void touch(int32_t node);
  void credit(int32_t node, bool hit, int64_t priority);
  EvictKey evict_key(int32_t node) const;
  void sync_leaf(int32_t node);
  int32_t index_of(NodeId id) const;  // throws for stale or unknown ids
  NodeId id_of(int32_t index) const;
  void check_aligned(std::span<const int32_t> tokens, std::span<const int32_t> values,
                     const char* what) const;
  void require_request_prefix(std::span<const int32_t> tokens, std::span<const int32_t> kv,
                              int32_t prefix_len, NodeId last_node, const char* what) const;

  int32_t page_size_;
  bool disabled_;
  EvictionPolicy policy_;
  std::vector<Node> nodes_;  // [0] is the root
  std::vector<int32_t> free_nodes_;
  std::set<EvictKey> leaves_;  // unlocked leaves, the next to evict first
  uint64_t clock_ = 0;
  int64_t evictable_size_ = 0;
  int64_t protected_size_ = 0;
};

}  // namespace actorlm
