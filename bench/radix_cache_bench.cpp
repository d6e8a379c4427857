// match_prefix and insert throughput of the radix cache on a tree of about
// 100,000 tokens shaped like serving traffic: a few long system prompts, each
// followed by many conversations of several turns.
//
//   ./build/bench/radix_cache_bench [page_size]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kvstore/radix_cache.hpp"

using actorlm::RadixCache;
using V = std::vector<int32_t>;

int main(int argc, char** argv) {
  int32_t page = argc > 1 ? std::atoi(argv[1]) : 1;
  if (page < 1 || page > 256) {
    std::fprintf(stderr, "page size must be in [1, 256]\n");
    return 2;
  }
  std::mt19937_64 rng(1);
  auto tok = [&] { return static_cast<int32_t>(rng() % 49152); };
  auto align = [&](V v) {
    v.resize(v.size() / static_cast<size_t>(page) * static_cast<size_t>(page));
    return v;
  };

  // 8 system prompts of ~1,100 tokens; 500 conversations of 3 user turns of
  // 60 tokens on top of one of them: ~9k + 500*180 ≈ 100k tokens.
  std::vector<V> systems(8);
  for (auto& s : systems) {
    s.resize(1000 + rng() % 200);
    std::generate(s.begin(), s.end(), tok);
  }
  std::vector<V> sequences;
  for (int c = 0; c < 500; ++c) {
    V seq = systems[rng() % systems.size()];
    for (int turn = 0; turn < 3; ++turn) {
      for (int i = 0; i < 60; ++i) seq.push_back(tok());
      sequences.push_back(align(seq));
    }
  }

  RadixCache tree(page);
  int32_t next_row = page;
  auto rows_for = [&](size_t n) {
    V v(n);
    for (auto& x : v) x = next_row++;
    return v;
  };
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  int64_t inserted_tokens = 0;
  for (const auto& s : sequences) {
    tree.insert(s, rows_for(s.size()));
    inserted_tokens += static_cast<int64_t>(s.size());
  }
  double insert_s = std::chrono::duration<double>(clock::now() - t0).count();

  // Queries: a cached conversation plus a new user turn (the common case).
  std::vector<V> queries;
  for (int q = 0; q < 20000; ++q) {
    V v = sequences[rng() % sequences.size()];
    for (int i = 0; i < 40; ++i) v.push_back(tok());
    queries.push_back(std::move(v));
  }
  int64_t tree_tokens = tree.total_size();
  size_t tree_nodes = tree.node_count();
  int64_t matched = 0, queried = 0;
  t0 = clock::now();
  for (const auto& q : queries) {
    matched += static_cast<int64_t>(tree.match_prefix(q).indices.size());
    queried += static_cast<int64_t>(q.size());
  }
  double match_s = std::chrono::duration<double>(clock::now() - t0).count();

  // Re-inserting finished requests (cache_finished_req's insert on a hit path).
  t0 = clock::now();
  for (int q = 0; q < 5000; ++q) {
    V s = align(queries[static_cast<size_t>(q)]);
    tree.insert(s, rows_for(s.size()));
  }
  double reinsert_s = std::chrono::duration<double>(clock::now() - t0).count();

  std::printf("radix_cache_bench page_size=%d\n", page);
  std::printf("  tree: %lld tokens in %zu nodes\n", static_cast<long long>(tree_tokens), tree_nodes);
  std::printf("  build: %zu inserts (%lld tokens) in %.3f s = %.0f inserts/s\n", sequences.size(),
              static_cast<long long>(inserted_tokens), insert_s, sequences.size() / insert_s);
  std::printf("  match_prefix: %zu queries (avg %.0f tokens, %.1f%% matched) = %.0f ops/s, %.1f M tokens/s\n",
              queries.size(), double(queried) / queries.size(), 100.0 * matched / queried,
              queries.size() / match_s, queried / match_s / 1e6);
  std::printf("  insert on a cached path: 5000 ops = %.0f ops/s\n", 5000 / reinsert_s);
  if (auto err = tree.check_integrity(); !err.empty()) {
    std::fprintf(stderr, "integrity: %s\n", err.c_str());
    return 1;
  }
  return 0;
}
