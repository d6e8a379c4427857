#include "kvstore/radix_cache.hpp"

#include <algorithm>
#include <cstdint>

#include "kvstore/kv_error.hpp"

namespace actorlm {

std::optional<EvictionPolicy> parse_eviction_policy(std::string_view name) {
  if (name == "lru") return EvictionPolicy::lru;
  if (name == "lfu") return EvictionPolicy::lfu;
  if (name == "priority") return EvictionPolicy::priority;
  return std::nullopt;
}

RadixCache::RadixCache(int32_t page_size, bool disabled, EvictionPolicy policy)
    : page_size_(page_size), disabled_(disabled), policy_(policy) {
  if (page_size < 1) throw KvStoreError("RadixCache: page_size must be >= 1");
  nodes_.emplace_back();
  nodes_[0].alive = true;
}

// --- node bookkeeping -------------------------------------------------------
//
// A NodeId is (generation << 32) | storage index. The root is index 0,
// generation 0, i.e. id 0. Freed storage is reused with generation + 1.

NodeId RadixCache::id_of(int32_t index) const {
  return (static_cast<NodeId>(nodes_[static_cast<size_t>(index)].generation) << 32) |
         static_cast<uint32_t>(index);
}

int32_t RadixCache::index_of(NodeId id) const {
  if (!valid(id)) {
    throw KvStoreError("RadixCache: node id " + std::to_string(id) + " is unknown or was evicted");
  }
  return static_cast<int32_t>(id & 0xffffffffu);
}

bool RadixCache::valid(NodeId id) const {
  auto index = static_cast<uint32_t>(id & 0xffffffffu);
  return index < nodes_.size() && nodes_[index].alive &&
         nodes_[index].generation == static_cast<uint32_t>(id >> 32);
}

int32_t RadixCache::new_node() {
  if (!free_nodes_.empty()) {
    int32_t i = free_nodes_.back();
    free_nodes_.pop_back();
    auto& n = nodes_[static_cast<size_t>(i)];
    uint32_t generation = n.generation + 1;
    n = Node{};
    n.generation = generation;
    n.alive = true;
    return i;
  }
  if (nodes_.size() > 0xffffffffu) throw KvStoreError("RadixCache: more than 2^32 nodes");
  nodes_.emplace_back();
  nodes_.back().alive = true;
  return static_cast<int32_t>(nodes_.size() - 1);
}

std::string_view RadixCache::page_key(std::span<const int32_t> tokens) const {
  return {reinterpret_cast<const char*>(tokens.data()),
          static_cast<size_t>(page_size_) * sizeof(int32_t)};
}

// tokens must hold at least one page.
int32_t RadixCache::find_child(int32_t node, std::span<const int32_t> tokens) const {
  const auto& children = nodes_[static_cast<size_t>(node)].children;
  auto it = children.find(page_key(tokens));
  return it == children.end() ? -1 : it->second;
}

// Leading tokens of `tokens` equal to `key`, rounded down to whole pages.
size_t RadixCache::match_len(const std::vector<int32_t>& key, std::span<const int32_t> tokens) const {
  size_t n = std::min(key.size(), tokens.size());
  auto diff = std::mismatch(key.begin(), key.begin() + static_cast<ptrdiff_t>(n), tokens.begin());
  auto i = static_cast<size_t>(diff.first - key.begin());
  return i / static_cast<size_t>(page_size_) * static_cast<size_t>(page_size_);
}

RadixCache::EvictKey RadixCache::evict_key(int32_t node) const {
  const Node& n = nodes_[static_cast<size_t>(node)];
  int64_t measure = 0;
  if (policy_ == EvictionPolicy::lfu) measure = static_cast<int64_t>(std::min<uint64_t>(n.hits, INT64_MAX));
  if (policy_ == EvictionPolicy::priority) measure = n.priority;
  return {measure, n.last_access, node};
}

// The eviction list holds exactly the unlocked leaves, under their current
// keys. Every change to a node's access time, hits, priority, lock count or
// children ends with sync_leaf on that node, so evict() never has to scan
// the tree.
void RadixCache::sync_leaf(int32_t node) {
  auto& n = nodes_[static_cast<size_t>(node)];
  bool want = node != 0 && n.alive && n.children.empty() && n.lock_ref == 0;
  if (n.listed && (!want || n.listed_key != evict_key(node))) {
    leaves_.erase(n.listed_key);
    n.listed = false;
  }
  if (want && !n.listed) {
    n.listed_key = evict_key(node);
    leaves_.insert(n.listed_key);
    n.listed = true;
  }
}

void RadixCache::touch(int32_t node) {
  nodes_[static_cast<size_t>(node)].last_access = clock_;
  sync_leaf(node);
}

// Called on a node after any split, so that only the part a request used
// (not the rest of a node it matched into) gains its hit and priority.
void RadixCache::credit(int32_t node, bool hit, int64_t priority) {
  auto& n = nodes_[static_cast<size_t>(node)];
  if (hit) ++n.hits;
  n.priority = std::max(n.priority, priority);
  sync_leaf(node);
}

// child = parent -> [key]; becomes parent -> upper [key[:at]] -> child [key[at:]].
// `at` is a positive multiple of the page size, less than the key length.
// The upper node inherits the lock count (every request locking child also
// locks everything above it) and the access time; the child keeps its id, so
// ids held by requests still name the end of their prefixes.
int32_t RadixCache::split(int32_t child, size_t at) {
  int32_t upper = new_node();  // may reallocate nodes_: take references afterwards
  auto& c = nodes_[static_cast<size_t>(child)];
  auto& u = nodes_[static_cast<size_t>(upper)];
  u.key.assign(c.key.begin(), c.key.begin() + static_cast<ptrdiff_t>(at));
  u.value.assign(c.value.begin(), c.value.begin() + static_cast<ptrdiff_t>(at));
  u.parent = c.parent;
  u.lock_ref = c.lock_ref;
  u.last_access = c.last_access;
  u.hits = c.hits;
  u.priority = c.priority;
  c.key.erase(c.key.begin(), c.key.begin() + static_cast<ptrdiff_t>(at));
  c.value.erase(c.value.begin(), c.value.begin() + static_cast<ptrdiff_t>(at));
  c.parent = upper;
  u.children.emplace(std::string(page_key(c.key)), child);
  // The parent's entry keeps its key (the first page did not change); it now
  // points at the upper node.
  nodes_[static_cast<size_t>(u.parent)].children.find(page_key(u.key))->second = upper;
  return upper;
}

void RadixCache::delete_leaf(int32_t node) {
  auto& n = nodes_[static_cast<size_t>(node)];
  int32_t parent = n.parent;
  auto& siblings = nodes_[static_cast<size_t>(parent)].children;
  siblings.erase(siblings.find(page_key(n.key)));
  n.alive = false;
  sync_leaf(node);
  n.key = {};
  n.value = {};
  n.children = {};
  free_nodes_.push_back(node);
  sync_leaf(parent);
}

void RadixCache::check_aligned(std::span<const int32_t> tokens, std::span<const int32_t> values,
                               const char* what) const {
  if (tokens.size() != values.size()) {
    throw KvStoreError(std::string("RadixCache::") + what + ": " + std::to_string(tokens.size()) +
                       " tokens but " + std::to_string(values.size()) + " values");
  }
  if (tokens.size() % static_cast<size_t>(page_size_) != 0) {
    throw KvStoreError(std::string("RadixCache::") + what + ": length " +
                       std::to_string(tokens.size()) + " is not a multiple of the page size " +
                       std::to_string(page_size_));
  }
  if (tokens.size() > 0x7fffffffu) {
    throw KvStoreError(std::string("RadixCache::") + what + ": more than 2^31 tokens");
  }
}

// --- match / insert ----------------------------------------------------------

RadixCache::MatchResult RadixCache::match_prefix(std::span<const int32_t> tokens, Use use) {
  MatchResult result;
  if (disabled_) return result;
  ++clock_;
  size_t len = tokens.size() / static_cast<size_t>(page_size_) * static_cast<size_t>(page_size_);
  tokens = tokens.first(len);
  int32_t node = 0;
  touch(0);
  size_t pos = 0;
  while (pos < len) {
    int32_t child = find_child(node, tokens.subspan(pos));
    if (child < 0) break;
    touch(child);
    // At least the first page matches (it is the child's map key).
    size_t m = match_len(nodes_[static_cast<size_t>(child)].key, tokens.subspan(pos));
    bool partial = m < nodes_[static_cast<size_t>(child)].key.size();
    if (partial) child = split(child, m);
    if (use.hit) credit(child, true, use.priority);
    const auto& v = nodes_[static_cast<size_t>(child)].value;
    result.indices.insert(result.indices.end(), v.begin(), v.end());
    node = child;
    pos += m;
    if (partial) break;
  }
  result.last_node = id_of(node);
  return result;
}

int32_t RadixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> values, int64_t priority) {
  check_aligned(tokens, values, "insert");
  if (disabled_) return 0;
  ++clock_;
  int32_t node = 0;
  touch(0);
  size_t pos = 0;
  while (pos < tokens.size()) {
    int32_t child = find_child(node, tokens.subspan(pos));
    if (child < 0) break;
    touch(child);
    size_t m = match_len(nodes_[static_cast<size_t>(child)].key, tokens.subspan(pos));
    pos += m;
    // A partial match ends the walk: the upper half of the split has a single
    // child whose first page differs from what is left of tokens.
    if (m < nodes_[static_cast<size_t>(child)].key.size()) child = split(child, m);
    // Inserting is no hit (the request counted when it was admitted), but
    // its priority is the path's from now on.
    credit(child, false, priority);
    node = child;
  }
  auto cached = static_cast<int32_t>(pos);
  if (pos < tokens.size()) {
    int32_t leaf = new_node();
    auto& l = nodes_[static_cast<size_t>(leaf)];
    l.key.assign(tokens.begin() + static_cast<ptrdiff_t>(pos), tokens.end());
    l.value.assign(values.begin() + static_cast<ptrdiff_t>(pos), values.end());
    l.parent = node;
    l.last_access = clock_;
    l.priority = priority;
    evictable_size_ += static_cast<int64_t>(l.value.size());
    nodes_[static_cast<size_t>(node)].children.emplace(std::string(page_key(l.key)), leaf);
    sync_leaf(node);  // no longer a leaf
    sync_leaf(leaf);
  }
  return cached;
}

// --- locks ------------------------------------------------------------------

int64_t RadixCache::inc_lock_ref(NodeId id) {
  if (disabled_) return 0;
  int64_t delta = 0;
  for (int32_t n = index_of(id); n != 0; n = nodes_[static_cast<size_t>(n)].parent) {
    auto& node = nodes_[static_cast<size_t>(n)];
    if (node.lock_ref == 0) {
      auto len = static_cast<int64_t>(node.value.size());
      evictable_size_ -= len;
      protected_size_ += len;
      delta -= len;
    }
    ++node.lock_ref;
    if (node.lock_ref == 1) sync_leaf(n);
  }
  return delta;
}

int64_t RadixCache::dec_lock_ref(NodeId id) {
  if (disabled_) return 0;
  int32_t start = index_of(id);
  // Check the whole path first so a bad unlock changes nothing.
  for (int32_t n = start; n != 0; n = nodes_[static_cast<size_t>(n)].parent) {
    if (nodes_[static_cast<size_t>(n)].lock_ref <= 0) {
      throw KvStoreError("RadixCache::dec_lock_ref: node " + std::to_string(id) +
                         " is not locked (its lock_ref would go below zero)");
    }
  }
  int64_t delta = 0;
  for (int32_t n = start; n != 0; n = nodes_[static_cast<size_t>(n)].parent) {
    auto& node = nodes_[static_cast<size_t>(n)];
    if (node.lock_ref == 1) {
      auto len = static_cast<int64_t>(node.value.size());
      evictable_size_ += len;
      protected_size_ -= len;
      delta += len;
    }
    --node.lock_ref;
    if (node.lock_ref == 0) sync_leaf(n);
  }
  return delta;
}

// --- eviction ---------------------------------------------------------------

std::vector<int32_t> RadixCache::evict(int64_t num_tokens, std::vector<EvictedPath>* evicted_paths) {
  std::vector<int32_t> freed;
  if (disabled_ || num_tokens <= 0) return freed;
  int64_t evicted = 0;
  // The policy's first unlocked leaf; ties by age, then node index. A parent
  // left childless and unlocked joins the list (delete_leaf syncs it) under
  // its own key, which never comes before its children's.
  while (evicted < num_tokens && !leaves_.empty()) {
    int32_t x = std::get<2>(*leaves_.begin());
    auto& n = nodes_[static_cast<size_t>(x)];
    freed.insert(freed.end(), n.value.begin(), n.value.end());
    if (evicted_paths) {
      // Keys from the node up to the root, then reversed into path order.
      EvictedPath p;
      for (int32_t at = x; at > 0; at = nodes_[static_cast<size_t>(at)].parent) {
        const Node& a = nodes_[static_cast<size_t>(at)];
        p.tokens.insert(p.tokens.end(), a.key.rbegin(), a.key.rend());
        p.rows.insert(p.rows.end(), a.value.rbegin(), a.value.rend());
      }
      std::reverse(p.tokens.begin(), p.tokens.end());
      std::reverse(p.rows.begin(), p.rows.end());
      p.start = static_cast<int32_t>(p.tokens.size() - n.key.size());
      evicted_paths->push_back(std::move(p));
    }
    auto len = static_cast<int64_t>(n.value.size());
    evicted += len;
    evictable_size_ -= len;
    delete_leaf(x);
  }
  return freed;
}

}  // namespace actorlm
