#include "cluster/roles/prefix_router.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace actorlm {

namespace {

constexpr int max_nodes = 1024;

void validate(const RouterConfig& cfg) {
  // Written as !(x >= 0) so that NaN is rejected too.
  if (!(cfg.cache_threshold >= 0.0)) {
    throw std::invalid_argument("RouterConfig: cache_threshold must be >= 0");
  }
  if (cfg.balance_abs_threshold < 0) {
    throw std::invalid_argument("RouterConfig: balance_abs_threshold must be >= 0");
  }
  if (!(cfg.balance_rel_threshold >= 0.0)) {
    throw std::invalid_argument("RouterConfig: balance_rel_threshold must be >= 0");
  }
  if (cfg.max_tree_tokens < 1) {
    throw std::invalid_argument("RouterConfig: max_tree_tokens must be >= 1");
  }
}

}  // namespace

PrefixRouter::PrefixRouter(int nodes, RouterConfig cfg) : cfg_(cfg) {
  if (nodes < 1 || nodes > max_nodes) {
    throw std::invalid_argument("PrefixRouter: nodes must be in [1, " + std::to_string(max_nodes) +
                                "], got " + std::to_string(nodes));
  }
  validate(cfg_);
  nodes_.resize(static_cast<size_t>(nodes));
  for (auto& n : nodes_) {
    n.stats.alive = true;
    n.cap = cfg_.max_tree_tokens;
  }
}

size_t PrefixRouter::checked(int node, const char* what) const {
  if (node < 0 || node >= nodes()) {
    throw std::out_of_range(std::string("PrefixRouter::") + what + ": node " +
                            std::to_string(node) + " is not in [0, " + std::to_string(nodes()) +
                            ")");
  }
  return static_cast<size_t>(node);
}

void PrefixRouter::set_alive(int node, bool alive) {
  auto& n = nodes_[checked(node, "set_alive")];
  if (n.stats.alive == alive) return;
  n.stats.alive = alive;
  if (!alive) {
    // Whatever the node had cached or was running is gone with it.
    n.mirror = RadixCache(1);
    n.stats.in_flight = 0;
    n.stats.tree_tokens = 0;
  }
}

bool PrefixRouter::alive(int node) const { return nodes_[checked(node, "alive")].stats.alive; }

const NodeRouteStats& PrefixRouter::stats(int node) const {
  return nodes_[checked(node, "stats")].stats;
}

void PrefixRouter::finished(int node) {
  auto& s = nodes_[checked(node, "finished")].stats;
  // A late finish from a node that died meanwhile must not go negative.
  s.in_flight = std::max(0, s.in_flight - 1);
}

void PrefixRouter::adopted(int node) { ++nodes_[checked(node, "adopted")].stats.in_flight; }

void PrefixRouter::set_capacity(int node, int64_t tokens) {
  auto& n = nodes_[checked(node, "set_capacity")];
  if (tokens < 1) {
    throw std::invalid_argument("PrefixRouter::set_capacity: tokens must be >= 1, got " +
                                std::to_string(tokens));
  }
  n.cap = std::min(tokens, cfg_.max_tree_tokens);
  trim(n);
}

bool PrefixRouter::less_loaded(size_t i, size_t j) const {
  const auto& a = nodes_[i].stats;
  const auto& b = nodes_[j].stats;
  if (a.in_flight != b.in_flight) return a.in_flight < b.in_flight;
  // Equal load: the emptier mirror, so new prefix groups spread out.
  if (a.tree_tokens != b.tree_tokens) return a.tree_tokens < b.tree_tokens;
  if (a.routed != b.routed) return a.routed < b.routed;
  return i < j;
}

RouteDecision PrefixRouter::route(std::span<const int32_t> prompt) {
  std::vector<size_t> live;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].stats.alive) live.push_back(i);
  }
  if (live.empty()) return {};

  // Matched length per node. match_prefix may split a mirror node and
  // refreshes LRU times on every mirror; both are harmless approximations.
  std::vector<int64_t> matched(nodes_.size(), 0);
  int32_t min_load = nodes_[live[0]].stats.in_flight;
  int32_t max_load = min_load;
  size_t best = live[0];
  for (size_t i : live) {
    const auto& s = nodes_[i].stats;
    if (!prompt.empty()) {
      matched[i] = static_cast<int64_t>(nodes_[i].mirror.match_prefix(prompt).indices.size());
    }
    min_load = std::min(min_load, s.in_flight);
    max_load = std::max(max_load, s.in_flight);
    // Longest match; ties to the less loaded, then (by scan order) lower index.
    if (matched[i] > matched[best] ||
        (matched[i] == matched[best] && s.in_flight < nodes_[best].stats.in_flight)) {
      best = i;
    }
  }

  bool imbalanced = max_load - min_load > cfg_.balance_abs_threshold &&
                    static_cast<double>(max_load) > cfg_.balance_rel_threshold * min_load;
  bool by_cache = !imbalanced && !prompt.empty() &&
                  static_cast<double>(matched[best]) >=
                      cfg_.cache_threshold * static_cast<double>(prompt.size());
  size_t chosen = best;
  if (!by_cache) {
    chosen = *std::min_element(live.begin(), live.end(),
                               [this](size_t a, size_t b) { return less_loaded(a, b); });
  }
  record(chosen, prompt, matched[chosen]);
  return {static_cast<int>(chosen), matched[chosen], by_cache};
}

void PrefixRouter::record(size_t node, std::span<const int32_t> prompt, int64_t matched) {
  auto& n = nodes_[node];
  if (rows_.size() < prompt.size()) {
    size_t old = rows_.size();
    rows_.resize(prompt.size());
    std::iota(rows_.begin() + static_cast<ptrdiff_t>(old), rows_.end(), static_cast<int32_t>(old));
  }
  n.mirror.insert(prompt, std::span<const int32_t>(rows_).first(prompt.size()));
  trim(n);
  ++n.stats.routed;
  ++n.stats.in_flight;
  n.stats.prompt_tokens += static_cast<int64_t>(prompt.size());
  n.stats.matched_tokens += matched;
}

// Nothing in a mirror is ever locked, so evict() can always get it under the
// cap; the prompt just inserted is the most recent and goes last.
void PrefixRouter::trim(Node& n) {
  int64_t over = n.mirror.total_size() - n.cap;
  if (over > 0) n.mirror.evict(over);
  n.stats.tree_tokens = n.mirror.total_size();
}

}  // namespace actorlm
