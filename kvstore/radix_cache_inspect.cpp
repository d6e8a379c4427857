// RadixCache's read-only side: lookups by node id and the integrity check.

#include <algorithm>
#include <unordered_set>

#include "kvstore/kv_error.hpp"
#include "kvstore/radix_cache.hpp"

namespace actorlm {

int32_t RadixCache::lock_ref(NodeId id) const { return nodes_[static_cast<size_t>(index_of(id))].lock_ref; }

RadixCache::NodeInfo RadixCache::node_info(NodeId id) const {
  int32_t i = index_of(id);
  const Node& n = nodes_[static_cast<size_t>(i)];
  NodeInfo info;
  info.id = id;
  info.parent = i == 0 ? root_id : id_of(n.parent);
  info.key_len = static_cast<int32_t>(n.key.size());
  for (int32_t p = i; p != 0; p = nodes_[static_cast<size_t>(p)].parent) {
    info.prefix_len += static_cast<int32_t>(nodes_[static_cast<size_t>(p)].key.size());
  }
  info.lock_ref = n.lock_ref;
  info.last_access = n.last_access;
  info.hits = n.hits;
  info.priority = n.priority;
  info.num_children = static_cast<int32_t>(n.children.size());
  return info;
}

std::vector<int32_t> RadixCache::path_values(NodeId id) const {
  std::vector<int32_t> rows;
  // Collect bottom-up, one node at a time, then put the nodes in order.
  std::vector<int32_t> path;
  for (int32_t p = index_of(id); p != 0; p = nodes_[static_cast<size_t>(p)].parent) path.push_back(p);
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    const auto& v = nodes_[static_cast<size_t>(*it)].value;
    rows.insert(rows.end(), v.begin(), v.end());
  }
  return rows;
}

std::vector<int32_t> RadixCache::all_rows() const {
  std::vector<int32_t> rows;
  rows.reserve(static_cast<size_t>(total_size()));
  for (size_t i = 1; i < nodes_.size(); ++i) {
    if (nodes_[i].alive) rows.insert(rows.end(), nodes_[i].value.begin(), nodes_[i].value.end());
  }
  return rows;
}

std::string RadixCache::check_lock_holders(std::span<const NodeId> holders) const {
  if (disabled_) return {};  // locks are no-ops
  std::vector<int32_t> expected(nodes_.size(), 0);
  for (NodeId h : holders) {
    if (h == root_id) continue;
    if (!valid(h)) return "lock holder " + std::to_string(h) + " names no live node";
    for (int32_t n = index_of(h); n != 0; n = nodes_[static_cast<size_t>(n)].parent) ++expected[static_cast<size_t>(n)];
  }
  for (size_t i = 1; i < nodes_.size(); ++i) {
    if (!nodes_[i].alive || nodes_[i].lock_ref == expected[i]) continue;
    return "node " + std::to_string(id_of(static_cast<int32_t>(i))) + " has lock_ref " +
           std::to_string(nodes_[i].lock_ref) + " but " + std::to_string(expected[i]) +
           " running requests hold it";
  }
  return {};
}

std::string RadixCache::check_integrity() const {
  int64_t evictable = 0, locked = 0;
  std::unordered_set<int32_t> rows;
  size_t alive = 0, leaves = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const auto& n = nodes_[i];
    std::string where = "node " + std::to_string(i) + ": ";
    if (!n.alive) {
      if (n.listed) return where + "dead but on the LRU list";
      continue;
    }
    ++alive;
    if (n.key.size() != n.value.size()) {
      return where + "key length " + std::to_string(n.key.size()) + " but value length " +
             std::to_string(n.value.size());
    }
    if (n.lock_ref < 0) return where + "negative lock_ref";
    if (i != 0) {
      if (n.key.empty() || n.key.size() % static_cast<size_t>(page_size_) != 0) {
        return where + "key length is not a positive multiple of the page size";
      }
      if (n.parent < 0 || static_cast<size_t>(n.parent) >= nodes_.size()) return where + "bad parent link";
      const auto& p = nodes_[static_cast<size_t>(n.parent)];
      if (!p.alive) return where + "parent is dead";
      auto it = p.children.find(page_key(n.key));
      if (it == p.children.end() || it->second != static_cast<int32_t>(i)) {
        return where + "parent does not list it under its first page";
      }
      if (n.parent != 0 && p.lock_ref < n.lock_ref) return where + "locked more than its parent";
      if (p.last_access < n.last_access) return where + "accessed after its parent";
      if (n.parent != 0 && p.hits < n.hits) return where + "hit more often than its parent";
      if (n.parent != 0 && p.priority < n.priority) return where + "of higher priority than its parent";
      (n.lock_ref > 0 ? locked : evictable) += static_cast<int64_t>(n.value.size());
      for (int32_t r : n.value) {
        if (!rows.insert(r).second) return where + "row " + std::to_string(r) + " appears twice in the tree";
      }
    }
    for (const auto& [k, c] : n.children) {
      if (c <= 0 || static_cast<size_t>(c) >= nodes_.size() || !nodes_[static_cast<size_t>(c)].alive ||
          nodes_[static_cast<size_t>(c)].parent != static_cast<int32_t>(i) ||
          page_key(nodes_[static_cast<size_t>(c)].key) != k) {
        return where + "child link is broken";
      }
    }
    bool evictable_leaf = i != 0 && n.children.empty() && n.lock_ref == 0;
    if (evictable_leaf != n.listed) {
      return where + (n.listed ? "on the eviction list but not an unlocked leaf" : "unlocked leaf missing from the eviction list");
    }
    if (n.listed) {
      ++leaves;
      if (n.listed_key != evict_key(static_cast<int32_t>(i)) || !leaves_.count(n.listed_key)) {
        return where + "eviction list entry is stale";
      }
    }
  }
  if (alive != node_count()) return "live node count disagrees with the free list";
  if (leaves != leaves_.size()) return "the eviction list holds entries for no node";
  if (evictable != evictable_size_) {
    return "evictable_size is off: counted " + std::to_string(evictable) + ", recorded " +
           std::to_string(evictable_size_);
  }
  if (locked != protected_size_) {
    return "protected_size is off: counted " + std::to_string(locked) + ", recorded " +
           std::to_string(protected_size_);
  }
  return {};
}

}  // namespace actorlm
