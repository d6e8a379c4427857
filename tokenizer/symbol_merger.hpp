#pragma once
// The merge loop shared by byte-level BPE (merge by rank) and SentencePiece
// BPE (merge by score): a doubly linked list of symbols over one string and a
// min-heap of candidate pairs. Each merge is O(log n), so a long word costs
// O(n log n) rather than the O(n^2) of rescanning all pairs per merge.
//
// Order: always the pair with the lowest priority value, leftmost on ties;
// the same result as repeatedly scanning for the best adjacent pair.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace actorlm {

struct MergeSymbol {
  uint32_t start = 0;  // byte offset in the merged string
  uint32_t len = 0;    // 0 once merged into its left neighbour
  int32_t id = -1;     // token id, -1 when the text is not a token
  int32_t prev = -1;
  int32_t next = -1;
};

struct MergeCandidate {
  double priority;  // lower merges first
  int32_t id;       // token id of the merged symbol
};

// pair_fn(const MergeSymbol& left, const MergeSymbol& right) ->
//   std::optional<MergeCandidate>: whether and how eagerly the two merge.
// symbols must be linked in order (prev/next) with symbols[0] first; on
// return, follow next from symbols[0] to read the result.
template <class PairFn>
void merge_symbols(std::vector<MergeSymbol>& symbols, PairFn&& pair_fn) {
  struct Entry {
    double priority;
    int32_t left, right;
    uint32_t len;  // left.len + right.len when queued: detects stale entries
    int32_t id;
  };
  // std::*_heap keep the largest first: "larger" = lower priority, then rightmost.
  auto worse = [](const Entry& a, const Entry& b) {
    return a.priority > b.priority || (a.priority == b.priority && a.left > b.left);
  };
  std::vector<Entry> heap;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const MergeSymbol& l = symbols[static_cast<size_t>(left)];
    const MergeSymbol& r = symbols[static_cast<size_t>(right)];
    if (std::optional<MergeCandidate> c = pair_fn(l, r)) {
      heap.push_back({c->priority, left, right, l.len + r.len, c->id});
      std::push_heap(heap.begin(), heap.end(), worse);
    }
  };
  for (size_t i = 1; i < symbols.size(); ++i) consider(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    Entry e = heap.back();
    heap.pop_back();
    MergeSymbol& l = symbols[static_cast<size_t>(e.left)];
    MergeSymbol& r = symbols[static_cast<size_t>(e.right)];
    // Both ends keep their start offsets while alive, so equal adjacency and
    // total length mean the pair still spells the same text.
    if (l.len == 0 || r.len == 0 || l.next != e.right || l.len + r.len != e.len) continue;
    l.len += r.len;
    l.id = e.id;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = e.left;
    consider(l.prev, e.left);
    consider(e.left, l.next);
  }
}

// Symbols for each UTF-8 character of s (a malformed lead byte is a symbol
// of its own; a truncated sequence at the end is cut to what is there).
std::vector<MergeSymbol> utf8_symbols(const char* s, size_t n);

}  // namespace actorlm
