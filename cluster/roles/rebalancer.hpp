#pragma once
// Rebalancing by live migration: which running request a head moves, and
// where, when its nodes' loads drift apart. Cache-aware routing sends
// prompts that share a prefix to the node that holds it (one prefill for the
// prefix), so a burst of such requests decodes on one node while another
// idles; moving some of them with their KV once they decode keeps the
// prefix's hit and spreads the decode. Plain code: the router actor
// (router_actor.cpp) asks it every --rebalance-interval and carries the
// move out as a drain does.
//
// Off by default (--rebalance-interval 0): each move pauses its stream for
// the copy (tens of milliseconds per 100 MB on loopback, docs/BENCHMARKS.md)
// and costs the target rows, which only pays when the gap lasts.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace actorlm {

struct RebalanceNode {
  int32_t requests = 0;       // placed there by the head (waiting, prefilling or decoding)
  bool takes_moves = false;   // joined, not draining, decodes (no prefill-only node)
  int32_t group = 0;          // moves stay within a group: data-parallel nodes, or decode nodes
};

struct RebalanceCandidate {
  uint64_t id = 0;
  int64_t tokens = 0;  // prompt and output so far: the KV a move copies
  bool decoding = false;  // has streamed a token (a request still waiting starts again instead)
  bool moved_before = false;  // by an earlier rebalance: never moved twice, so nothing bounces
};

struct RebalanceMove {
  int from = -1, to = -1;
};

// The most loaded node that takes moves and the least loaded one of its
// group, when their gap is at least `min_gap` requests (>= 2: a move must
// leave the two at least as even as before); none else. Ties: lowest index.
std::optional<RebalanceMove> pick_nodes(std::span<const RebalanceNode> nodes, int32_t min_gap);

// Of the source's requests, the one to move: decoding, never moved by a
// rebalance before, with the least KV to copy (ties: the lowest id). None
// when no request qualifies.
std::optional<uint64_t> pick_request(std::span<const RebalanceCandidate> candidates);

}  // namespace actorlm
