// The pool runs every index exactly once, for any split of n over threads, in
// back-to-back loops (workers spinning) and after pauses (workers asleep).

#include "kernels/cpu/thread_pool.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

using actorlm::cpu::ThreadPool;

namespace {

// Runs one loop over n and requires every index to have been seen once, in
// contiguous, non-empty chunks.
void require_each_index_once(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  std::atomic<int> bad_chunks{0};
  pool.parallel_for(n, [&](int64_t begin, int64_t end) {
    if (begin < 0 || end > n || begin >= end) bad_chunks.fetch_add(1);
    for (int64_t i = begin; i < end; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
  });
  REQUIRE(bad_chunks.load() == 0);
  for (int64_t i = 0; i < n; ++i) {
    INFO("index " << i << " of " << n);
    REQUIRE(seen[static_cast<size_t>(i)].load() == 1);
  }
}

}  // namespace

TEST_CASE("Every index runs exactly once, whatever the split", "[kernels][pool]") {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    REQUIRE(pool.size() == threads);
    for (int64_t n : {0, 1, 2, 3, 7, 8, 9, 20, 21, 100, 1001}) {
      INFO(threads << " threads, n = " << n);
      for (int rep = 0; rep < 20; ++rep) require_each_index_once(pool, n);
    }
  }
}

TEST_CASE("Many short loops in a row, and loops after the workers slept", "[kernels][pool]") {
  ThreadPool pool(2);
  // Back to back: workers stay spinning between loops.
  std::atomic<int64_t> total{0};
  for (int rep = 0; rep < 20000; ++rep) {
    pool.parallel_for(8, [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
  }
  CHECK(total.load() == 8 * 20000);
  // With pauses longer than the spin time: each loop wakes sleeping workers.
  for (int rep = 0; rep < 20; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    require_each_index_once(pool, 64);
  }
}

TEST_CASE("Results written by workers are visible when parallel_for returns", "[kernels][pool]") {
  ThreadPool pool(3);
  std::vector<int64_t> out(5000);
  for (int rep = 0; rep < 200; ++rep) {
    pool.parallel_for(static_cast<int64_t>(out.size()), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[static_cast<size_t>(i)] = i * rep;
    });
    for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == static_cast<int64_t>(i) * rep);
  }
}
