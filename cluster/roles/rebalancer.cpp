#include "cluster/roles/rebalancer.hpp"

#include <stdexcept>

namespace actorlm {

std::optional<RebalanceMove> pick_nodes(std::span<const RebalanceNode> nodes, int32_t min_gap) {
  if (min_gap < 2) throw std::invalid_argument("a rebalance gap below 2 requests would move one back and forth");
  std::optional<RebalanceMove> best;
  int32_t best_gap = min_gap - 1;
  // The widest gap within any group; a group is small (the nodes of one head).
  for (size_t from = 0; from < nodes.size(); ++from) {
    if (!nodes[from].takes_moves) continue;
    for (size_t to = 0; to < nodes.size(); ++to) {
      if (to == from || !nodes[to].takes_moves || nodes[to].group != nodes[from].group) continue;
      const int32_t gap = nodes[from].requests - nodes[to].requests;
      if (gap > best_gap) {
        best_gap = gap;
        best = RebalanceMove{static_cast<int>(from), static_cast<int>(to)};
      }
    }
  }
  return best;
}

std::optional<uint64_t> pick_request(std::span<const RebalanceCandidate> candidates) {
  const RebalanceCandidate* best = nullptr;
  for (const auto& c : candidates) {
    if (!c.decoding || c.moved_before) continue;
    if (!best || c.tokens < best->tokens || (c.tokens == best->tokens && c.id < best->id)) best = &c;
  }
  if (!best) return std::nullopt;
  return best->id;
}

}  // namespace actorlm
