#pragma once
// The head's cache-aware routing policy for data parallelism over N worker
// nodes (SGLang's router, "cache_aware" policy).
//
// Each worker keeps its own radix prefix cache, so a request prefills fastest
// on the node that already holds the longest prefix of its prompt. The head
// cannot ask every node on every request, so it keeps an approximate mirror
// of each node's cache: one RadixCache (page size 1) per node, holding every
// prompt routed there. Mirror values are dummy rows (positions); only the
// keys and the tree's LRU order matter. The mirror is approximate by design:
// it never sees the node's own evictions or generated tokens, so it is capped
// (max_tree_tokens, or the node's KV pool size via set_capacity) and its LRU
// leaves are evicted beyond the cap, as the node would do.
//
// Cache affinity alone would send a popular prefix to one node forever, so a
// load check (in-flight requests per node) comes first; when no node holds a
// useful prefix, new prefix groups go to the least-loaded, least-filled node,
// which spreads them across the cluster.
//
// Pure policy: no I/O, no CAF. Single owner (the head's router actor); not
// thread-safe.

#include <cstdint>
#include <span>
#include <vector>

#include "kvstore/radix_cache.hpp"

namespace actorlm {

struct RouterConfig {
  double cache_threshold = 0.5;        // route by cache when best match / prompt length >= this
  int32_t balance_abs_threshold = 16;  // load imbalance that overrides the cache...
  double balance_rel_threshold = 1.5;  // ...when max_load > rel * min_load as well
  int64_t max_tree_tokens = 1 << 20;   // per-node mirror cap; LRU leaves evicted beyond it
};

struct RouteDecision {
  int node = -1;         // -1: no node is alive
  int64_t matched = 0;   // prompt tokens found in the chosen node's mirror
  bool by_cache = false; // chosen for its prefix match rather than its load
};

struct NodeRouteStats {
  int64_t routed = 0;          // requests sent to the node
  int64_t prompt_tokens = 0;   // their prompt tokens
  int64_t matched_tokens = 0;  // of which the mirror already held (estimated cache hits)
  int32_t in_flight = 0;       // routed and not yet finished()
  bool alive = false;
  int64_t tree_tokens = 0;     // tokens in the node's mirror
};

class PrefixRouter {
 public:
  // 1 <= nodes <= 1024 and a sane cfg, else std::invalid_argument. Every
  // node starts alive with an empty mirror.
  explicit PrefixRouter(int nodes, RouterConfig cfg = {});

  int nodes() const { return static_cast<int>(nodes_.size()); }

  // A node going down loses its mirror (its cache is gone too) and its
  // in-flight count (its requests are gone); coming back it starts empty.
  // Setting the state it already has changes nothing.
  void set_alive(int node, bool alive);
  bool alive(int node) const;

  // Chooses an alive node for this prompt and records the choice (mirror
  // insert, in_flight++, stats). Node -1, and nothing recorded, when no node
  // is alive. Policy, over alive nodes:
  //  1. loads imbalanced (max - min in_flight > abs threshold and
  //     max > rel * min): the least-loaded node;
  //  2. else best match / prompt length >= cache_threshold: the longest
  //     match (ties: least in_flight, then lowest index);
  //  3. else (and for an empty prompt) the least-loaded node (ties: fewest
  //     mirror tokens, then fewest routed, then lowest index).
  // Cost: one prefix match per alive node, O(prompt length) each.
  RouteDecision route(std::span<const int32_t> prompt);

  // One request routed to node ended: in_flight-- (never below 0).
  void finished(int node);
  // A running request came to node from elsewhere (live migration): in_flight++.
  void adopted(int node);

  // Caps the node's mirror at min(tokens, max_tree_tokens), e.g. its KV pool
  // size in tokens, evicting at once if it is over. tokens >= 1.
  void set_capacity(int node, int64_t tokens);

  const NodeRouteStats& stats(int node) const;

 private:
  struct Node {
    RadixCache mirror{1};
    NodeRouteStats stats;
    int64_t cap = 0;
  };

  // node as an index into nodes_, or std::out_of_range naming the caller.
  size_t checked(int node, const char* what) const;
  // i is less loaded than j (rule 3's order).
  bool less_loaded(size_t i, size_t j) const;
  void record(size_t node, std::span<const int32_t> prompt, int64_t matched);
  void trim(Node& n);

  RouterConfig cfg_;
  std::vector<Node> nodes_;
  std::vector<int32_t> rows_;  // 0, 1, 2, ...: the mirror's dummy values
};

}  // namespace actorlm
