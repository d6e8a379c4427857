// RadixCache's request-level operations: the tree's half of SGLang's
// cache_finished_req / cache_unfinished_req, plus release on abort.
//
// A request's rows, by position (P = page size, L = tokens with KV):
//
//   [0, prefix_len)            the tree's own rows on root..last_node, locked
//                              by this request
//   [prefix_len, cached)       private whole pages whose tokens the tree
//                              already holds (another request cached them
//                              while this one computed them too): duplicates,
//                              freed by the caller
//   [cached, aligned)          private whole pages the tree did not have:
//                              insert hands them to the tree
//   [aligned, L)               private partial last page (aligned = L / P * P):
//                              freed at finish, kept by a running request
//
// prefix_len, cached and aligned are all multiples of P, so each range is
// whole pages except the tail, which is one page of its own — every free
// below returns pages the caller owned outright.

#include <algorithm>

#include "kvstore/kv_error.hpp"
#include "kvstore/radix_cache.hpp"

namespace actorlm {

std::string RadixCache::check_request_prefix(std::span<const int32_t> tokens,
                                             std::span<const int32_t> kv, int32_t prefix_len,
                                             NodeId last_node) const {
  if (!tokens.empty() && tokens.size() != kv.size()) {
    return std::to_string(tokens.size()) + " tokens but " + std::to_string(kv.size()) + " rows";
  }
  if (prefix_len < 0 || static_cast<size_t>(prefix_len) > kv.size()) {
    return "prefix_len " + std::to_string(prefix_len) + " outside [0, " + std::to_string(kv.size()) + "]";
  }
  if (prefix_len % page_size_ != 0) {
    return "prefix_len " + std::to_string(prefix_len) + " is not a multiple of the page size " +
           std::to_string(page_size_);
  }
  if (disabled_) {
    if (prefix_len != 0 || last_node != root_id) return "a disabled cache holds no prefix";
    return {};
  }
  if (!valid(last_node)) return "node id " + std::to_string(last_node) + " is unknown or was evicted";
  auto end = static_cast<size_t>(prefix_len);
  for (auto n = static_cast<int32_t>(last_node & 0xffffffffu); n != 0;
       n = nodes_[static_cast<size_t>(n)].parent) {
    const Node& node = nodes_[static_cast<size_t>(n)];
    if (node.lock_ref <= 0) return "node " + std::to_string(last_node) + " is not locked";
    if (node.key.size() > end) {
      return "node " + std::to_string(last_node) + " is deeper than prefix_len " + std::to_string(prefix_len);
    }
    size_t begin = end - node.key.size();
    if (!std::equal(node.value.begin(), node.value.end(), kv.begin() + static_cast<ptrdiff_t>(begin))) {
      return "rows [" + std::to_string(begin) + ", " + std::to_string(end) +
             ") differ from the cached rows of that prefix";
    }
    if (!tokens.empty() &&
        !std::equal(node.key.begin(), node.key.end(), tokens.begin() + static_cast<ptrdiff_t>(begin))) {
      return "tokens [" + std::to_string(begin) + ", " + std::to_string(end) +
             ") differ from the cached prefix";
    }
    end = begin;
  }
  if (end != 0) {
    return "node " + std::to_string(last_node) + " is only " + std::to_string(prefix_len - end) +
           " tokens deep, not prefix_len " + std::to_string(prefix_len);
  }
  return {};
}

void RadixCache::require_request_prefix(std::span<const int32_t> tokens, std::span<const int32_t> kv,
                                        int32_t prefix_len, NodeId last_node, const char* what) const {
  if (kv.size() > 0x7fffffffu) throw KvStoreError(std::string("RadixCache::") + what + ": too many rows");
  if (auto error = check_request_prefix(tokens, kv, prefix_len, last_node); !error.empty()) {
    throw KvStoreError(std::string("RadixCache::") + what + ": " + error);
  }
}

namespace {

void require_same_length(std::span<const int32_t> tokens, std::span<const int32_t> kv, const char* what) {
  if (tokens.size() != kv.size()) {
    throw KvStoreError(std::string("RadixCache::") + what + ": " + std::to_string(tokens.size()) +
                       " tokens but " + std::to_string(kv.size()) + " rows");
  }
}

}  // namespace

RadixCache::CacheResult RadixCache::cache_finished_req(std::span<const int32_t> tokens,
                                                       std::span<const int32_t> kv,
                                                       int32_t prefix_len, NodeId last_node, int64_t priority) {
  require_same_length(tokens, kv, "cache_finished_req");
  require_request_prefix(tokens, kv, prefix_len, last_node, "cache_finished_req");
  CacheResult result;
  if (disabled_) {
    result.to_free.assign(kv.begin(), kv.end());
    return result;
  }
  size_t aligned = kv.size() / static_cast<size_t>(page_size_) * static_cast<size_t>(page_size_);
  // At least prefix_len: the request's locked path spells tokens[0, prefix_len).
  auto cached = static_cast<size_t>(insert(tokens.first(aligned), kv.first(aligned), priority));
  result.to_free.assign(kv.begin() + prefix_len, kv.begin() + static_cast<ptrdiff_t>(cached));
  result.to_free.insert(result.to_free.end(), kv.begin() + static_cast<ptrdiff_t>(aligned), kv.end());
  dec_lock_ref(last_node);
  return result;
}

RadixCache::CacheResult RadixCache::cache_unfinished_req(std::span<const int32_t> tokens,
                                                         std::span<const int32_t> kv,
                                                         int32_t prefix_len, NodeId last_node, int64_t priority) {
  require_same_length(tokens, kv, "cache_unfinished_req");
  require_request_prefix(tokens, kv, prefix_len, last_node, "cache_unfinished_req");
  CacheResult result;
  if (disabled_) {
    result.new_prefix_len = prefix_len;
    result.new_last_node = last_node;
    return result;
  }
  size_t aligned = kv.size() / static_cast<size_t>(page_size_) * static_cast<size_t>(page_size_);
  auto cached = static_cast<size_t>(insert(tokens.first(aligned), kv.first(aligned), priority));
  result.to_free.assign(kv.begin() + prefix_len, kv.begin() + static_cast<ptrdiff_t>(cached));
  // Re-match to get the tree's rows for the whole aligned part (its own for
  // [0, cached), the request's former rows for [cached, aligned)) and the
  // node that now ends it.
  MatchResult m = match_prefix(tokens.first(aligned));
  if (m.indices.size() != aligned) {
    throw KvStoreError("RadixCache::cache_unfinished_req: internal error, re-match found " +
                       std::to_string(m.indices.size()) + " of " + std::to_string(aligned) + " tokens");
  }
  // Lock the new path before unlocking the old one so shared ancestors never
  // look evictable in between.
  inc_lock_ref(m.last_node);
  dec_lock_ref(last_node);
  result.new_prefix_len = static_cast<int32_t>(aligned);
  result.new_prefix_indices = std::move(m.indices);
  result.new_last_node = m.last_node;
  return result;
}

std::vector<int32_t> RadixCache::release_req(std::span<const int32_t> kv, int32_t prefix_len,
                                             NodeId last_node) {
  require_request_prefix({}, kv, prefix_len, last_node, "release_req");
  dec_lock_ref(last_node);
  return {kv.begin() + prefix_len, kv.end()};
}

}  // namespace actorlm
