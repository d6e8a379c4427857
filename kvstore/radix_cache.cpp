#include "kvstore/radix_cache.hpp"

#include <algorithm>
#include <queue>
#include <tuple>
#include <unordered_set>

#include "kvstore/kv_error.hpp"

namespace actorlm {

RadixCache::RadixCache(int32_t page_size, bool disabled) : page_size_(page_size), disabled_(disabled) {
  if (page_size < 1) throw KvStoreError("RadixCache: page_size must be >= 1");
  nodes_.emplace_back();
  nodes_[0].alive = true;
}

// --- node bookkeeping -------------------------------------------------------

NodeId RadixCache::id_of(int32_t index) const {
  return (static_cast<NodeId>(nodes_[static_cast<size_t>(index)].generation) << 32) |
         static_cast<uint32_t>(index);
}

int32_t RadixCache::index_of(NodeId id) const {
  auto index = static_cast<uint32_t>(id & 0xffffffffu);
  auto generation = static_cast<uint32_t>(id >> 32);
  if (index >= nodes_.size() || !nodes_[index].alive || nodes_[index].generation != generation) {
    throw KvStoreError("RadixCache: node id " + std::to_string(id) + " is unknown or was evicted");
  }
  return static_cast<int32_t>(index);
}

bool RadixCache::valid(NodeId id) const {
  auto index = static_cast<uint32_t>(id & 0xffffffffu);
  return index < nodes_.size() && nodes_[index].alive &&
         nodes_[index].generation == static_cast<uint32_t>(id >> 32);
}

int32_t RadixCache::lock_ref(NodeId id) const { return nodes_[static_cast<size_t>(index_of(id))].lock_ref; }

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
  nodes_.emplace_back();
  nodes_.back().alive = true;
  return static_cast<int32_t>(nodes_.size() - 1);
}

std::string_view RadixCache::page_key(std::span<const int32_t> tokens) const {
  return {reinterpret_cast<const char*>(tokens.data()),
          static_cast<size_t>(page_size_) * sizeof(int32_t)};
}

int32_t RadixCache::find_child(int32_t node, std::span<const int32_t> tokens) const {
  const auto& children = nodes_[static_cast<size_t>(node)].children;
  auto it = children.find(page_key(tokens));
  return it == children.end() ? -1 : it->second;
}

// Tokens of `tokens` matching `key`, in whole pages.
size_t RadixCache::match_len(const std::vector<int32_t>& key, std::span<const int32_t> tokens) const {
  size_t n = std::min(key.size(), tokens.size());
  size_t i = 0;
  while (i < n && key[i] == tokens[i]) ++i;
  return i / static_cast<size_t>(page_size_) * static_cast<size_t>(page_size_);
}

// child = parent -> [key]; becomes parent -> upper [key[:at]] -> child [key[at:]].
// The upper node inherits the lock count: every request locking child also
// locks everything above it.
int32_t RadixCache::split(int32_t child, size_t at) {
  int32_t upper = new_node();  // may reallocate nodes_: take references afterwards
  auto& c = nodes_[static_cast<size_t>(child)];
  auto& u = nodes_[static_cast<size_t>(upper)];
  u.key.assign(c.key.begin(), c.key.begin() + static_cast<ptrdiff_t>(at));
  u.value.assign(c.value.begin(), c.value.begin() + static_cast<ptrdiff_t>(at));
  u.parent = c.parent;
  u.lock_ref = c.lock_ref;
  u.last_access = c.last_access;
  c.key.erase(c.key.begin(), c.key.begin() + static_cast<ptrdiff_t>(at));
  c.value.erase(c.value.begin(), c.value.begin() + static_cast<ptrdiff_t>(at));
  c.parent = upper;
  u.children.emplace(std::string(page_key(c.key)), child);
  nodes_[static_cast<size_t>(u.parent)].children[std::string(page_key(u.key))] = upper;
  return upper;
}

void RadixCache::delete_leaf(int32_t node) {
  auto& n = nodes_[static_cast<size_t>(node)];
  auto& siblings = nodes_[static_cast<size_t>(n.parent)].children;
  siblings.erase(siblings.find(page_key(n.key)));
  n.alive = false;
  n.key.clear();
  n.value.clear();
  n.children.clear();
  free_nodes_.push_back(node);
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
}

// --- match / insert ----------------------------------------------------------

RadixCache::MatchResult RadixCache::match_prefix(std::span<const int32_t> tokens) {
  MatchResult result;
  if (disabled_) return result;
  ++clock_;
  size_t len = tokens.size() / static_cast<size_t>(page_size_) * static_cast<size_t>(page_size_);
  int32_t node = 0;
  nodes_[0].last_access = clock_;
  size_t pos = 0;
  while (pos < len) {
    int32_t child = find_child(node, tokens.subspan(pos));
    if (child < 0) break;
    nodes_[static_cast<size_t>(child)].last_access = clock_;
    size_t m = match_len(nodes_[static_cast<size_t>(child)].key, tokens.subspan(pos, len - pos));
    if (m < nodes_[static_cast<size_t>(child)].key.size()) child = split(child, m);
    const auto& v = nodes_[static_cast<size_t>(child)].value;
    result.indices.insert(result.indices.end(), v.begin(), v.end());
    node = child;
    pos += m;
    if (m < nodes_[static_cast<size_t>(child)].key.size()) break;  // cannot happen after split
  }
  result.last_node = id_of(node);
  return result;
}

int32_t RadixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> values) {
  check_aligned(tokens, values, "insert");
  if (disabled_) return 0;
  ++clock_;
  int32_t node = 0;
  nodes_[0].last_access = clock_;
  size_t pos = 0;
  while (pos < tokens.size()) {
    int32_t child = find_child(node, tokens.subspan(pos));
    if (child < 0) break;
    nodes_[static_cast<size_t>(child)].last_access = clock_;
    size_t m = match_len(nodes_[static_cast<size_t>(child)].key, tokens.subspan(pos));
    pos += m;
    // A partial match ends the walk: the upper half of the split has a single
    // child whose first page differs from what is left of tokens.
    if (m < nodes_[static_cast<size_t>(child)].key.size()) child = split(child, m);
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
    nodes_[static_cast<size_t>(node)].children.emplace(std::string(page_key(l.key)), leaf);
    evictable_size_ += static_cast<int64_t>(l.value.size());
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
  }
  return delta;
}

int64_t RadixCache::dec_lock_ref(NodeId id) {
  if (disabled_) return 0;
  int32_t start = index_of(id);
  for (int32_t n = start; n != 0; n = nodes_[static_cast<size_t>(n)].parent) {
    if (nodes_[static_cast<size_t>(n)].lock_ref <= 0) {
      throw KvStoreError("RadixCache::dec_lock_ref: node " + std::to_string(id) +
                         " has an unlocked ancestor");
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
  }
  return delta;
}

// --- eviction ---------------------------------------------------------------

std::vector<int32_t> RadixCache::evict(int64_t num_tokens) {
  std::vector<int32_t> freed;
  if (disabled_ || num_tokens <= 0) return freed;
  // Min-heap on (last access, index): oldest first, ties in a fixed order.
  using Entry = std::pair<uint64_t, int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> leaves;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const auto& n = nodes_[i];
    if (n.alive && n.children.empty() && n.lock_ref == 0) {
      leaves.emplace(n.last_access, static_cast<int32_t>(i));
    }
  }
  int64_t evicted = 0;
  while (evicted < num_tokens && !leaves.empty()) {
    int32_t x = leaves.top().second;
    leaves.pop();
    auto& n = nodes_[static_cast<size_t>(x)];
    freed.insert(freed.end(), n.value.begin(), n.value.end());
    auto len = static_cast<int64_t>(n.value.size());
    evicted += len;
    evictable_size_ -= len;
    int32_t parent = n.parent;
    delete_leaf(x);
    const auto& p = nodes_[static_cast<size_t>(parent)];
    if (parent != 0 && p.children.empty() && p.lock_ref == 0) leaves.emplace(p.last_access, parent);
  }
  return freed;
}

// --- request-level operations ------------------------------------------------
//
// A request's rows, by position (P = page size, L = tokens with KV):
//
//   [0, prefix_len)           shared with the tree, locked through last_node
//   [prefix_len, aligned)     private whole pages; after insert, the part below
//                             new_prefix_len duplicates rows the tree already
//                             had (computed twice) and is freed
//   [aligned, L)              private partial last page (aligned = L / P * P):
//                             freed at finish, kept while the request runs

RadixCache::CacheResult RadixCache::cache_finished_req(std::span<const int32_t> tokens,
                                                       std::span<const int32_t> kv,
                                                       int32_t prefix_len, NodeId last_node) {
  if (tokens.size() != kv.size() || prefix_len < 0 || static_cast<size_t>(prefix_len) > kv.size()) {
    throw KvStoreError("RadixCache::cache_finished_req: inconsistent request lengths");
  }
  CacheResult result;
  if (disabled_) {
    result.to_free.assign(kv.begin(), kv.end());
    return result;
  }
  size_t aligned = kv.size() / static_cast<size_t>(page_size_) * static_cast<size_t>(page_size_);
  auto new_prefix = static_cast<size_t>(insert(tokens.first(aligned), kv.first(aligned)));
  result.to_free.assign(kv.begin() + prefix_len, kv.begin() + static_cast<ptrdiff_t>(new_prefix));
  result.to_free.insert(result.to_free.end(), kv.begin() + static_cast<ptrdiff_t>(aligned), kv.end());
  dec_lock_ref(last_node);
  return result;
}

RadixCache::CacheResult RadixCache::cache_unfinished_req(std::span<const int32_t> tokens,
                                                         std::span<const int32_t> kv,
                                                         int32_t prefix_len, NodeId last_node) {
  if (tokens.size() != kv.size() || prefix_len < 0 || static_cast<size_t>(prefix_len) > kv.size()) {
    throw KvStoreError("RadixCache::cache_unfinished_req: inconsistent request lengths");
  }
  CacheResult result;
  if (disabled_) {
    result.new_prefix_len = prefix_len;
    result.new_last_node = last_node;
    return result;
  }
  size_t aligned = kv.size() / static_cast<size_t>(page_size_) * static_cast<size_t>(page_size_);
  auto new_prefix = static_cast<size_t>(insert(tokens.first(aligned), kv.first(aligned)));
  result.to_free.assign(kv.begin() + prefix_len, kv.begin() + static_cast<ptrdiff_t>(new_prefix));
  MatchResult m = match_prefix(tokens.first(aligned));
  // Lock the new path before unlocking the old one so shared ancestors never
  // look evictable in between.
  inc_lock_ref(m.last_node);
  dec_lock_ref(last_node);
  result.new_prefix_len = static_cast<int32_t>(m.indices.size());
  result.new_prefix_indices = std::move(m.indices);
  result.new_last_node = m.last_node;
  return result;
}

std::vector<int32_t> RadixCache::release_req(std::span<const int32_t> kv, int32_t prefix_len,
                                             NodeId last_node) {
  if (prefix_len < 0 || static_cast<size_t>(prefix_len) > kv.size()) {
    throw KvStoreError("RadixCache::release_req: prefix_len out of range");
  }
  dec_lock_ref(last_node);
  return {kv.begin() + prefix_len, kv.end()};
}

// --- inspection ---------------------------------------------------------------

std::vector<int32_t> RadixCache::all_rows() const {
  std::vector<int32_t> rows;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    if (nodes_[i].alive) rows.insert(rows.end(), nodes_[i].value.begin(), nodes_[i].value.end());
  }
  return rows;
}

std::string RadixCache::check_integrity() const {
  int64_t evictable = 0, locked = 0;
  std::unordered_set<int32_t> rows;
  size_t alive = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const auto& n = nodes_[i];
    if (!n.alive) continue;
    ++alive;
    std::string where = "node " + std::to_string(i) + ": ";
    if (n.key.size() != n.value.size()) return where + "key and value lengths differ";
    if (n.lock_ref < 0) return where + "negative lock_ref";
    if (i != 0) {
      if (n.key.empty() || n.key.size() % static_cast<size_t>(page_size_) != 0)
        return where + "key length is not a positive multiple of the page size";
      const auto& p = nodes_[static_cast<size_t>(n.parent)];
      if (!p.alive) return where + "parent is dead";
      auto it = p.children.find(page_key(n.key));
      if (it == p.children.end() || it->second != static_cast<int32_t>(i))
        return where + "parent does not list it under its first page";
      if (n.parent != 0 && p.lock_ref < n.lock_ref) return where + "locked more than its parent";
      (n.lock_ref > 0 ? locked : evictable) += static_cast<int64_t>(n.value.size());
      for (int32_t r : n.value) {
        if (!rows.insert(r).second) return where + "row " + std::to_string(r) + " appears twice";
      }
    }
    for (const auto& [k, c] : n.children) {
      if (c < 0 || static_cast<size_t>(c) >= nodes_.size() || !nodes_[static_cast<size_t>(c)].alive ||
          nodes_[static_cast<size_t>(c)].parent != static_cast<int32_t>(i))
        return where + "child link is broken";
    }
  }
  if (alive != node_count()) return "live node count disagrees with the free list";
  if (evictable != evictable_size_) return "evictable_size is off: counted " + std::to_string(evictable) +
                                            ", recorded " + std::to_string(evictable_size_);
  if (locked != protected_size_) return "protected_size is off: counted " + std::to_string(locked) +
                                        ", recorded " + std::to_string(protected_size_);
  return {};
}

}  // namespace actorlm
