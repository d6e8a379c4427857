// Which request a head moves when its nodes' loads drift apart, and where.

#include "cluster/roles/rebalancer.hpp"

#include <catch2/catch.hpp>
#include <vector>

namespace actorlm {

TEST_CASE("The widest gap within a group decides the move, and a small one moves nothing", "[rebalancer]") {
  std::vector<RebalanceNode> nodes = {{8, true, 0}, {0, true, 0}, {3, true, 0}};
  auto m = pick_nodes(nodes, 2);
  REQUIRE(m);
  CHECK(m->from == 0);
  CHECK(m->to == 1);
  // One move at a time evens them out, and then nothing moves.
  int moves = 0;
  while (auto next = pick_nodes(nodes, 2)) {
    --nodes[static_cast<size_t>(next->from)].requests;
    ++nodes[static_cast<size_t>(next->to)].requests;
    REQUIRE(++moves < 20);
  }
  CHECK(moves == 4);  // 8, 0, 3 -> 4, 4, 3
  for (const auto& n : nodes) CHECK((n.requests == 4 || n.requests == 3));
  // A gap of one is left alone: moving would only swap the two.
  CHECK_FALSE(pick_nodes(std::vector<RebalanceNode>{{2, true, 0}, {1, true, 0}}, 2));
  CHECK_FALSE(pick_nodes(std::vector<RebalanceNode>{{5, true, 0}, {1, true, 0}}, 5));
  CHECK(pick_nodes(std::vector<RebalanceNode>{{6, true, 0}, {1, true, 0}}, 5));
  CHECK_THROWS_AS(pick_nodes(nodes, 1), std::invalid_argument);
}

TEST_CASE("Nodes that take no moves, and other groups, are never source or target", "[rebalancer]") {
  // A draining (or prefill-only, or lost) node with many requests is the drain's business.
  CHECK_FALSE(pick_nodes(std::vector<RebalanceNode>{{9, false, 0}, {0, true, 0}}, 2));
  CHECK_FALSE(pick_nodes(std::vector<RebalanceNode>{{9, true, 0}, {0, false, 0}}, 2));
  // Data-parallel nodes (group 0) and decode nodes (group 1) do not trade requests.
  const std::vector<RebalanceNode> mixed = {{9, true, 0}, {0, true, 1}, {5, true, 1}, {1, true, 0}};
  auto m = pick_nodes(mixed, 2);
  REQUIRE(m);
  CHECK(m->from == 0);
  CHECK(m->to == 3);
  const std::vector<RebalanceNode> decode_only = {{1, true, 0}, {0, true, 1}, {5, true, 1}, {1, true, 0}};
  m = pick_nodes(decode_only, 2);
  REQUIRE(m);
  CHECK(m->from == 2);
  CHECK(m->to == 1);
}

TEST_CASE("The request moved is a decoding one with the least KV, never one moved before", "[rebalancer]") {
  std::vector<RebalanceCandidate> c = {{10, 900, true, false}, {11, 300, false, false}, {12, 500, true, true},
                                       {13, 600, true, false}, {14, 600, true, false}};
  CHECK(pick_request(c) == std::optional<uint64_t>(13));
  c[3].tokens = 601;
  CHECK(pick_request(c) == std::optional<uint64_t>(14));
  for (auto& x : c) x.moved_before = true;
  CHECK_FALSE(pick_request(c));
  CHECK_FALSE(pick_request(std::vector<RebalanceCandidate>{{1, 10, false, false}}));
  CHECK_FALSE(pick_request(std::vector<RebalanceCandidate>{}));
}

}  // namespace actorlm
