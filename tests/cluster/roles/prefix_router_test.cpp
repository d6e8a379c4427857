// PrefixRouter: cache affinity, spreading of prefix groups, dead nodes,
// load overrides, bounded mirrors, argument checks.

#include "cluster/roles/prefix_router.hpp"

#include <catch2/catch.hpp>
#include <algorithm>
#include <numeric>
#include <stdexcept>

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

// A prompt of group `group`: a shared 64-token prefix, then a 4-token suffix
// unique to `id`.
Ids prompt(int32_t group, int32_t id) {
  Ids p(64);
  std::iota(p.begin(), p.end(), group * 1000);
  for (int32_t k = 0; k < 4; ++k) p.push_back(1'000'000 + id * 4 + k);
  return p;
}

}  // namespace

TEST_CASE("requests sharing a long prefix go to the same node") {
  PrefixRouter r(4);
  auto first = r.route(prompt(7, 0));
  REQUIRE(first.node >= 0);
  CHECK_FALSE(first.by_cache);
  for (int32_t i = 1; i < 10; ++i) {
    auto d = r.route(prompt(7, i));
    CHECK(d.node == first.node);
    CHECK(d.by_cache);
    CHECK(d.matched == 64);
  }
  CHECK(r.stats(first.node).routed == 10);
  CHECK(r.stats(first.node).matched_tokens == 9 * 64);
  CHECK(r.stats(first.node).prompt_tokens == 10 * 68);
}

TEST_CASE("two prefix groups sent alternately end on different nodes") {
  PrefixRouter r(2);
  int a = -1, b = -1;
  for (int32_t i = 0; i < 6; ++i) {
    // Finished at once: equal loads, so the emptier mirror takes group B.
    auto da = r.route(prompt(1, 2 * i));
    r.finished(da.node);
    auto db = r.route(prompt(2, 2 * i + 1));
    r.finished(db.node);
    if (i == 0) a = da.node, b = db.node;
    CHECK(da.node == a);
    CHECK(db.node == b);
  }
  CHECK(a != b);
}

TEST_CASE("equal load: a new group goes to the emptier mirror") {
  PrefixRouter r(2);
  Ids long_prompt(200);
  std::iota(long_prompt.begin(), long_prompt.end(), 0);
  REQUIRE(r.route(long_prompt).node == 0);
  r.finished(0);
  REQUIRE(r.route(prompt(5, 0)).node == 1);  // 68 tokens
  r.finished(1);
  // Same load, same routed count: node 1 holds fewer tokens.
  CHECK(r.route(prompt(6, 1)).node == 1);
}

TEST_CASE("a dead node gets nothing and comes back with an empty mirror") {
  PrefixRouter r(2);
  for (int32_t i = 0; i < 3; ++i) REQUIRE(r.route(prompt(1, i)).node == 0);
  r.set_alive(0, false);
  CHECK_FALSE(r.alive(0));
  CHECK(r.stats(0).tree_tokens == 0);
  CHECK(r.stats(0).in_flight == 0);
  for (int32_t i = 3; i < 8; ++i) CHECK(r.route(prompt(1, i)).node == 1);
  for (int32_t i = 0; i < 5; ++i) r.finished(1);

  r.set_alive(0, true);
  // Equal loads: had node 0 kept its mirror, the tie on match would pick it.
  auto d = r.route(prompt(1, 8));
  CHECK(d.node == 1);
  CHECK(d.by_cache);
  // A new group: no match anywhere, so the idle node by load.
  auto e = r.route(prompt(2, 9));
  CHECK(e.node == 0);
  CHECK_FALSE(e.by_cache);
  CHECK(e.matched == 0);
}

TEST_CASE("load imbalance overrides cache affinity") {
  PrefixRouter r(2);  // abs 16, rel 1.5
  std::vector<RouteDecision> d;
  for (int32_t i = 0; i < 40; ++i) d.push_back(r.route(prompt(3, i)));
  // Node 0 takes the group until it runs 17 more than node 1 (17 > 16, 17 > 1.5 * 0).
  for (int i = 0; i < 17; ++i) CHECK(d[static_cast<size_t>(i)].node == 0);
  CHECK(d[17].node == 1);
  CHECK_FALSE(d[17].by_cache);
  CHECK(r.stats(1).routed > 0);
  CHECK(r.stats(0).in_flight + r.stats(1).in_flight == 40);
}

TEST_CASE("the relative threshold must be crossed as well") {
  PrefixRouter r(2, RouterConfig{0.5, 2, 5.0, 1 << 20});
  REQUIRE(r.route(prompt(1, 0)).node == 0);
  REQUIRE(r.route(prompt(2, 1)).node == 1);  // no match: least loaded
  int on_zero = 1;
  while (on_zero < 20 && r.route(prompt(1, 100 + on_zero)).node == 0) ++on_zero;
  // Imbalanced only once 6 - 1 > 2 and 6 > 5 * 1; abs alone would stop at 4.
  CHECK(on_zero == 6);
}

TEST_CASE("finished decreases load") {
  PrefixRouter r(2, RouterConfig{0.5, 1, 1.0, 1 << 20});
  REQUIRE(r.route(prompt(1, 0)).node == 0);
  REQUIRE(r.route(prompt(1, 1)).node == 0);
  CHECK(r.stats(0).in_flight == 2);
  r.finished(0);
  r.finished(0);
  r.finished(0);  // never below zero
  CHECK(r.stats(0).in_flight == 0);
  // With load 2 against 0 this would have gone to node 1.
  auto d = r.route(prompt(1, 2));
  CHECK(d.node == 0);
  CHECK(d.by_cache);
}

TEST_CASE("no alive node gives -1 and records nothing") {
  PrefixRouter r(2);
  r.set_alive(0, false);
  r.set_alive(1, false);
  auto d = r.route(prompt(1, 0));
  CHECK(d.node == -1);
  CHECK(r.stats(0).routed == 0);
  CHECK(r.stats(1).routed == 0);
  CHECK(r.route(Ids{}).node == -1);
  r.set_alive(1, true);
  CHECK(r.route(Ids{}).node == 1);  // empty prompt: least loaded
}

TEST_CASE("mirrors stay under their cap") {
  PrefixRouter r(2, RouterConfig{0.5, 16, 1.5, 1000});
  r.set_capacity(1, 300);
  int64_t grew0 = 0, grew1 = 0;
  for (int32_t i = 0; i < 200; ++i) {
    // 200 distinct groups, none finished: they alternate, 6800 tokens each.
    r.route(prompt(10 + i, i));
    grew0 = std::max(grew0, r.stats(0).tree_tokens);
    grew1 = std::max(grew1, r.stats(1).tree_tokens);
    CHECK(r.stats(0).tree_tokens <= 1000);
    CHECK(r.stats(1).tree_tokens <= 300);
  }
  CHECK(r.stats(0).routed == 100);
  CHECK(grew0 > 900);  // the caps were reached, not avoided
  CHECK(grew1 > 200);
  // The newest prompt survives eviction.
  auto last = prompt(10 + 199, 199);
  CHECK(r.route(last).matched == 68);
}

TEST_CASE("bad arguments throw") {
  CHECK_THROWS_AS(PrefixRouter(0), std::invalid_argument);
  CHECK_THROWS_AS(PrefixRouter(1025), std::invalid_argument);
  CHECK_THROWS_AS(PrefixRouter(2, RouterConfig{0.5, 16, 1.5, 0}), std::invalid_argument);
  PrefixRouter r(2);
  CHECK_THROWS_AS(r.set_alive(2, true), std::out_of_range);
  CHECK_THROWS_AS(r.alive(-1), std::out_of_range);
  CHECK_THROWS_AS(r.finished(5), std::out_of_range);
  CHECK_THROWS_AS(r.set_capacity(2, 10), std::out_of_range);
  CHECK_THROWS_AS(r.stats(2), std::out_of_range);
  CHECK_THROWS_AS(r.set_capacity(0, 0), std::invalid_argument);
  CHECK_THROWS_WITH(r.stats(7), Catch::Contains("node 7"));
}
