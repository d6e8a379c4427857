#include "kvstore/radix_cache.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

#include "kvstore/kv_error.hpp"

using actorlm::KvStoreError;
using actorlm::RadixCache;
using V = std::vector<int32_t>;

namespace {
// Token ids standing for the letters in the design notes' examples.
constexpr int32_t A = 101, B = 102, C = 103, D = 104, E = 105, F = 106, G = 107, H = 108;

void require_sound(const RadixCache& t) { REQUIRE(t.check_integrity().empty()); }
}  // namespace

TEST_CASE("Insert over a cached prefix returns the cached length", "[kvstore][radix]") {
  RadixCache t(1);
  CHECK(t.insert(V{A, B}, V{1, 2}) == 0);
  // [A,B,C,D,E] over cached [A,B]: 2 were there already; C, D, E are added.
  CHECK(t.insert(V{A, B, C, D, E}, V{11, 12, 3, 4, 5}) == 2);
  CHECK(t.total_size() == 5);
  auto m = t.match_prefix(V{A, B, C, D, E});
  CHECK(m.indices == V{1, 2, 3, 4, 5});  // the tree keeps its own rows for A, B
  require_sound(t);
}

TEST_CASE("KV computed twice is freed as duplicates when the request finishes", "[kvstore][radix]") {
  RadixCache t(1);
  t.insert(V{A, B, C}, V{1, 2, 3});
  // Request R finds [A,B,C] cached and locks it.
  auto m = t.match_prefix(V{A, B, C, D, E, F, G, H});
  REQUIRE(m.indices == V{1, 2, 3});
  t.inc_lock_ref(m.last_node);
  // Meanwhile another request caches [A..E]; D and E get rows 14, 15.
  CHECK(t.insert(V{A, B, C, D, E}, V{1, 2, 3, 14, 15}) == 3);
  // R computed D..H itself in rows 24..28: its D, E are duplicates.
  V tokens{A, B, C, D, E, F, G, H};
  V kv{1, 2, 3, 24, 25, 26, 27, 28};
  auto res = t.cache_finished_req(tokens, kv, 3, m.last_node);
  CHECK(res.to_free == V{24, 25});
  CHECK(t.match_prefix(tokens).indices == V{1, 2, 3, 14, 15, 26, 27, 28});
  CHECK(t.protected_size() == 0);
  CHECK(t.evictable_size() == 8);
  require_sound(t);
}

TEST_CASE("A partial match splits the node", "[kvstore][radix]") {
  RadixCache t(1);
  t.insert(V{1, 2, 3, 4}, V{10, 20, 30, 40});
  REQUIRE(t.node_count() == 2);  // root + one leaf
  auto m = t.match_prefix(V{1, 2, 9});
  CHECK(m.indices == V{10, 20});
  CHECK(t.node_count() == 3);  // root -> [1,2] -> [3,4]
  // The new upper node is what the match returns; the old leaf keeps its rows.
  CHECK(t.match_prefix(V{1, 2, 3, 4}).indices == V{10, 20, 30, 40});
  CHECK(t.insert(V{1, 2, 7, 8}, V{10, 20, 70, 80}) == 2);
  CHECK(t.node_count() == 4);
  require_sound(t);
}

TEST_CASE("Paged tree matches and splits at page boundaries only", "[kvstore][radix]") {
  RadixCache t(4);
  V key{1, 2, 3, 4, 5, 6, 7, 8};
  t.insert(key, V{10, 11, 12, 13, 20, 21, 22, 23});
  // 6 tokens agree, but only the first whole page counts.
  auto m = t.match_prefix(V{1, 2, 3, 4, 5, 6, 0, 0, 9});
  CHECK(m.indices == V{10, 11, 12, 13});
  // A query shorter than a page matches nothing.
  CHECK(t.match_prefix(V{1, 2, 3}).indices.empty());
  CHECK_THROWS_AS(t.insert(V{1, 2, 3}, V{1, 2, 3}), KvStoreError);  // not page-aligned
  require_sound(t);
}

TEST_CASE("A locked path is never evicted", "[kvstore][radix]") {
  RadixCache t(1);
  t.insert(V{1, 2, 3}, V{11, 12, 13});
  t.insert(V{1, 2, 5, 6}, V{11, 12, 15, 16});
  auto locked = t.match_prefix(V{1, 2, 3});
  t.inc_lock_ref(locked.last_node);
  CHECK(t.protected_size() == 3);
  CHECK(t.evictable_size() == 2);
  auto freed = t.evict(100);
  std::sort(freed.begin(), freed.end());
  CHECK(freed == V{15, 16});
  CHECK(t.match_prefix(V{1, 2, 3}).indices == V{11, 12, 13});
  require_sound(t);
  t.dec_lock_ref(locked.last_node);
  CHECK(t.evictable_size() == 3);
  freed = t.evict(100);
  std::sort(freed.begin(), freed.end());
  CHECK(freed == V{11, 12, 13});
  CHECK(t.total_size() == 0);
  require_sound(t);
}

TEST_CASE("Eviction takes least recently used leaves first", "[kvstore][radix]") {
  RadixCache t(1);
  t.insert(V{1, 1}, V{11, 12});
  t.insert(V{2, 2}, V{21, 22});
  t.insert(V{3, 3}, V{31, 32});
  t.match_prefix(V{1, 1});        // 1 is now the most recent
  CHECK(t.evict(2) == V{21, 22});  // 2 is the oldest
  CHECK(t.evict(2) == V{31, 32});
  CHECK(t.evict(2) == V{11, 12});
  CHECK(t.evict(2).empty());
}

TEST_CASE("Eviction climbs to parents that become leaves", "[kvstore][radix]") {
  RadixCache t(1);
  t.insert(V{1, 2}, V{11, 12});
  t.insert(V{1, 2, 3, 4}, V{11, 12, 13, 14});
  auto freed = t.evict(4);
  CHECK(freed == V{13, 14, 11, 12});
  CHECK(t.node_count() == 1);
}

TEST_CASE("cache_unfinished_req moves the lock to the new deepest node", "[kvstore][radix]") {
  RadixCache t(2);
  t.insert(V{1, 2}, V{2, 3});
  auto m = t.match_prefix(V{1, 2, 3, 4, 5});
  t.inc_lock_ref(m.last_node);
  // The request computed 3 more tokens (rows 8, 9, 10); whole pages: 4 tokens.
  V tokens{1, 2, 3, 4, 5};
  V kv{2, 3, 8, 9, 10};
  auto res = t.cache_unfinished_req(tokens, kv, 2, m.last_node);
  CHECK(res.to_free.empty());
  CHECK(res.new_prefix_len == 4);
  CHECK(res.new_prefix_indices == V{2, 3, 8, 9});
  CHECK(t.lock_ref(res.new_last_node) == 1);
  CHECK(t.protected_size() == 4);  // rows 2, 3, 8, 9 locked; row 10 stays private
  CHECK(t.evictable_size() == 0);
  require_sound(t);
  auto done = t.cache_finished_req(tokens, kv, res.new_prefix_len, res.new_last_node);
  CHECK(done.to_free == V{10});  // the unaligned tail
  CHECK(t.protected_size() == 0);
  require_sound(t);
}

TEST_CASE("Lock misuse and stale node ids are errors", "[kvstore][radix]") {
  RadixCache t(1);
  t.insert(V{1, 2}, V{11, 12});
  auto m = t.match_prefix(V{1, 2});
  CHECK_THROWS_AS(t.dec_lock_ref(m.last_node), KvStoreError);
  t.evict(2);
  CHECK_FALSE(t.valid(m.last_node));
  CHECK_THROWS_AS(t.inc_lock_ref(m.last_node), KvStoreError);
  // A new node reusing the storage gets a different id.
  t.insert(V{5}, V{15});
  auto again = t.match_prefix(V{5});
  CHECK(again.last_node != m.last_node);
  CHECK(t.valid(again.last_node));
}

TEST_CASE("Disabled cache reuses nothing and frees everything on finish", "[kvstore][radix]") {
  RadixCache t(1, /*disabled=*/true);
  CHECK(t.insert(V{1, 2, 3}, V{11, 12, 13}) == 0);
  CHECK(t.match_prefix(V{1, 2, 3}).indices.empty());
  auto res = t.cache_finished_req(V{1, 2, 3}, V{11, 12, 13}, 0, RadixCache::root_id);
  CHECK(res.to_free == V{11, 12, 13});
  CHECK(t.total_size() == 0);
}
