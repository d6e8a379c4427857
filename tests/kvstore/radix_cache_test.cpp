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
  // (The seed's prose says insert "returns 5" here, but its code returns the
  // matched length — total_prefix_length — which is 2; only that makes the
  // caller's free of kv[len(prefix_indices) : new_prefix_len] correct: it
  // frees nothing here, where freeing [2, 5) would free C, D, E while the
  // tree holds them.)
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

TEST_CASE("lfu eviction takes the least hit leaf first, and probes and inserts are no hits", "[kvstore][radix]") {
  using actorlm::EvictionPolicy;
  RadixCache t(1, false, EvictionPolicy::lfu);
  t.insert(V{1, 1}, V{11, 12});
  t.insert(V{2, 2}, V{21, 22});
  t.insert(V{3, 3}, V{31, 32});
  for (int i = 0; i < 3; ++i) t.match_prefix(V{2, 2}, {.priority = 0, .hit = true});  // 2: three admissions
  t.match_prefix(V{3, 3}, {.priority = 0, .hit = true});                             // 3: one
  for (int i = 0; i < 5; ++i) t.match_prefix(V{1, 1});  // 1: probes only, the most recent
  t.insert(V{1, 1}, V{11, 12});                          // and an insert: still no hit
  CHECK(t.node_info(t.match_prefix(V{2, 2}).last_node).hits == 3);
  require_sound(t);
  CHECK(t.evict(2) == V{11, 12});  // no hit, though the most recent: first
  CHECK(t.evict(2) == V{31, 32});
  CHECK(t.evict(2) == V{21, 22});
  // The same calls under lru evict by age alone.
  RadixCache l(1);
  l.insert(V{1, 1}, V{11, 12});
  l.insert(V{2, 2}, V{21, 22});
  l.match_prefix(V{2, 2}, {.priority = 0, .hit = true});
  l.match_prefix(V{1, 1});
  CHECK(l.evict(2) == V{21, 22});
}

TEST_CASE("lfu: a split keeps the hits on both halves and parents count every hit below", "[kvstore][radix]") {
  RadixCache t(1, false, actorlm::EvictionPolicy::lfu);
  t.insert(V{1, 2, 3}, V{11, 12, 13});
  t.match_prefix(V{1, 2, 3}, {.priority = 0, .hit = true});
  t.match_prefix(V{1, 2, 3}, {.priority = 0, .hit = true});
  t.insert(V{1, 2, 6}, V{11, 12, 16});  // splits [1,2] off [3]
  auto upper = t.match_prefix(V{1, 2}).last_node;
  CHECK(t.node_info(upper).hits == 2);
  t.match_prefix(V{1, 2, 6}, {.priority = 0, .hit = true});
  CHECK(t.node_info(upper).hits == 3);
  require_sound(t);
  // [6] (1 hit) goes before [3] (2 hits), though [3] is older.
  CHECK(t.evict(1) == V{16});
  CHECK(t.evict(1) == V{13});
  CHECK(t.evict(1) == V{11, 12});
}

TEST_CASE("priority eviction spares the prefixes of more urgent requests", "[kvstore][radix]") {
  RadixCache t(1, false, actorlm::EvictionPolicy::priority);
  // Inserted by requests of priority 5, -3 and 0 (larger: more urgent).
  t.insert(V{1, 1}, V{11, 12}, 5);
  t.insert(V{2, 2}, V{21, 22}, -3);
  t.insert(V{3, 3}, V{31, 32}, 0);
  // A probe lends nothing; an admission of priority 9 raises [3]; a later
  // use by a less urgent request lowers nothing.
  t.match_prefix(V{2, 2}, {.priority = 100, .hit = false});
  t.match_prefix(V{3, 3}, {.priority = 9, .hit = true});
  t.match_prefix(V{3, 3}, {.priority = -50, .hit = true});
  CHECK(t.node_info(t.match_prefix(V{3, 3}).last_node).priority == 9);
  // A shared prefix carries its most urgent user's priority.
  t.insert(V{4, 4, 4}, V{41, 42, 43}, -7);
  t.insert(V{4, 4, 5}, V{41, 42, 53}, 2);
  CHECK(t.node_info(t.match_prefix(V{4, 4}).last_node).priority == 2);
  require_sound(t);
  // Lowest priority first, whatever the age: -7, -3, 2, then the shared
  // [4,4] (2, a leaf once both children are gone), 5, 9.
  CHECK(t.evict(1) == V{43});
  CHECK(t.evict(1) == V{21, 22});
  CHECK(t.evict(1) == V{53});
  CHECK(t.evict(1) == V{41, 42});
  CHECK(t.evict(1) == V{11, 12});
  CHECK(t.evict(1) == V{31, 32});
  require_sound(t);
}

TEST_CASE("Eviction climbs to parents that become leaves", "[kvstore][radix]") {
  RadixCache t(1);
  t.insert(V{1, 2}, V{11, 12});
  t.insert(V{1, 2, 3, 4}, V{11, 12, 13, 14});
  auto freed = t.evict(4);
  CHECK(freed == V{13, 14, 11, 12});
  CHECK(t.node_count() == 1);
}

TEST_CASE("Eviction can report each evicted node's whole path for a tier below", "[kvstore][radix]") {
  RadixCache t(2);
  t.insert(V{1, 2, 3, 4}, V{11, 12, 13, 14});
  t.insert(V{1, 2, 5, 6, 7, 8}, V{11, 12, 15, 16, 17, 18});  // splits {1,2} off as a parent
  t.match_prefix(V{1, 2, 3, 4});                            // {5..8} is now the oldest leaf
  std::vector<RadixCache::EvictedPath> paths;
  CHECK(t.evict(2, &paths) == V{15, 16, 17, 18});
  REQUIRE(paths.size() == 1);
  CHECK(paths[0].tokens == V{1, 2, 5, 6, 7, 8});
  CHECK(paths[0].rows == V{11, 12, 15, 16, 17, 18});
  CHECK(paths[0].start == 2);
  // The parent goes after its last child, reported with a path of its own.
  CHECK(t.evict(4, &paths) == V{13, 14, 11, 12});
  REQUIRE(paths.size() == 3);
  CHECK(paths[1].tokens == V{1, 2, 3, 4});
  CHECK(paths[1].start == 2);
  CHECK(paths[2].tokens == V{1, 2});
  CHECK(paths[2].rows == V{11, 12});
  CHECK(paths[2].start == 0);
  require_sound(t);
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

TEST_CASE("Seed example: a later prefill chunk frees KV the cache already had", "[kvstore][radix]") {
  // The cache holds [A,B,C,D,E]. A request matched [A,B,C] in step 1 and then
  // computed [D,E,F,G,H] itself in step 2: its D and E are duplicates.
  RadixCache t(1);
  t.insert(V{A, B, C, D, E}, V{1, 2, 3, 4, 5});
  auto m = t.match_prefix(V{A, B, C});
  REQUIRE(m.indices == V{1, 2, 3});
  t.inc_lock_ref(m.last_node);
  V tokens{A, B, C, D, E, F, G, H};
  V kv{1, 2, 3, 40, 50, 60, 70, 80};
  auto res = t.cache_unfinished_req(tokens, kv, 3, m.last_node);
  CHECK(res.to_free == V{40, 50});
  CHECK(res.new_prefix_len == 8);
  CHECK(res.new_prefix_indices == V{1, 2, 3, 4, 5, 60, 70, 80});
  CHECK(t.lock_ref(res.new_last_node) == 1);
  // The old node is still on the request's path, now locked once through it.
  REQUIRE(t.valid(m.last_node));
  CHECK(t.lock_ref(m.last_node) == 1);
  CHECK(t.protected_size() == 8);
  CHECK(t.evictable_size() == 0);
  require_sound(t);
  // The request finishes with one more token: the tail is its own.
  V done_tokens = tokens;
  done_tokens.push_back(A);
  V done_kv = res.new_prefix_indices;
  done_kv.push_back(90);
  auto fin = t.cache_finished_req(done_tokens, done_kv, 8, res.new_last_node);
  CHECK(fin.to_free.empty());  // page size 1: no unaligned tail, no duplicates
  CHECK(t.total_size() == 9);
  CHECK(t.protected_size() == 0);
  require_sound(t);
}

TEST_CASE("Node ids: stable across splits, lookups by id, stale ids detected", "[kvstore][radix]") {
  RadixCache t(2);
  t.insert(V{1, 2, 3, 4, 5, 6}, V{10, 11, 12, 13, 14, 15});
  auto whole = t.match_prefix(V{1, 2, 3, 4, 5, 6});
  t.inc_lock_ref(whole.last_node);
  auto info = t.node_info(whole.last_node);
  CHECK(info.key_len == 6);
  CHECK(info.prefix_len == 6);
  CHECK(info.parent == RadixCache::root_id);
  CHECK(info.lock_ref == 1);
  // A shorter match splits the node: the upper half is new, the lower keeps its id.
  auto part = t.match_prefix(V{1, 2, 9, 9});
  CHECK(part.indices == V{10, 11});
  CHECK(part.last_node != whole.last_node);
  REQUIRE(t.valid(whole.last_node));
  info = t.node_info(whole.last_node);
  CHECK(info.key_len == 4);
  CHECK(info.prefix_len == 6);
  CHECK(info.parent == part.last_node);
  auto upper = t.node_info(part.last_node);
  CHECK(upper.key_len == 2);
  CHECK(upper.lock_ref == 1);  // inherited: the lock on the lower node covers it
  CHECK(upper.num_children == 1);
  CHECK(t.path_values(whole.last_node) == V{10, 11, 12, 13, 14, 15});
  CHECK(t.path_values(part.last_node) == V{10, 11});
  CHECK(t.path_values(RadixCache::root_id).empty());
  CHECK(t.node_info(RadixCache::root_id).prefix_len == 0);
  require_sound(t);
  // Unlock and evict everything: the ids go stale and stay stale even when
  // their storage is reused.
  t.dec_lock_ref(whole.last_node);
  CHECK(t.evict(100).size() == 6);
  CHECK_FALSE(t.valid(whole.last_node));
  CHECK_THROWS_AS(t.node_info(whole.last_node), KvStoreError);
  CHECK_THROWS_AS(t.path_values(part.last_node), KvStoreError);
  t.insert(V{7, 7}, V{70, 71});
  CHECK_FALSE(t.valid(whole.last_node));
  CHECK_FALSE(t.valid(part.last_node));
  CHECK_FALSE(t.valid(~actorlm::NodeId{0}));
}

TEST_CASE("Request operations reject a prefix the tree does not hold, changing nothing", "[kvstore][radix]") {
  int32_t page = GENERATE(1, 4);
  RadixCache t(page);
  V key(static_cast<size_t>(4 * page)), rows(key.size());
  for (size_t i = 0; i < key.size(); ++i) {
    key[i] = static_cast<int32_t>(i) + 1;
    rows[i] = static_cast<int32_t>(i) + 100;
  }
  t.insert(key, rows);
  auto m = t.match_prefix(V(key.begin(), key.begin() + 2 * page));
  t.inc_lock_ref(m.last_node);
  auto prefix = static_cast<int32_t>(2 * page);
  // The request: its locked prefix plus 3 pages + 1 token of its own.
  V tokens(key.begin(), key.begin() + prefix), kv(m.indices);
  for (int32_t i = 0; i < 3 * page + 1; ++i) {
    tokens.push_back(1000 + i);
    kv.push_back(5000 + i);
  }
  auto before_e = t.evictable_size(), before_p = t.protected_size();
  auto nodes = t.node_count();
  auto unchanged = [&] {
    CHECK(t.evictable_size() == before_e);
    CHECK(t.protected_size() == before_p);
    CHECK(t.node_count() == nodes);
    require_sound(t);
  };
  // prefix_len disagreeing with the node's depth
  CHECK_THROWS_AS(t.cache_finished_req(tokens, kv, prefix + page, m.last_node), KvStoreError);
  CHECK_THROWS_AS(t.cache_finished_req(tokens, kv, prefix - page, m.last_node), KvStoreError);
  // not page-aligned (page > 1), negative, beyond the request
  if (page > 1) CHECK_THROWS_AS(t.cache_unfinished_req(tokens, kv, prefix - 1, m.last_node), KvStoreError);
  CHECK_THROWS_AS(t.release_req(kv, -page, m.last_node), KvStoreError);
  CHECK_THROWS_AS(t.release_req(V{}, prefix, m.last_node), KvStoreError);
  // rows or tokens that are not the tree's
  V bad_kv = kv;
  bad_kv[0] = 7;
  CHECK_THROWS_AS(t.cache_unfinished_req(tokens, bad_kv, prefix, m.last_node), KvStoreError);
  V bad_tokens = tokens;
  bad_tokens[static_cast<size_t>(prefix - 1)] = -5;
  CHECK_THROWS_AS(t.cache_finished_req(bad_tokens, kv, prefix, m.last_node), KvStoreError);
  // token and row counts differ
  CHECK_THROWS_AS(t.cache_finished_req(V(tokens.begin(), tokens.end() - 1), kv, prefix, m.last_node), KvStoreError);
  // a path nobody locked
  auto other = t.match_prefix(key);
  CHECK_THROWS_AS(t.release_req(V(rows.begin(), rows.end()), 4 * page, other.last_node), KvStoreError);
  unchanged();
  CHECK(t.check_request_prefix(tokens, kv, prefix, m.last_node).empty());
  // The right call goes through: the new whole pages are cached and a partial
  // last page returned (with page size 1 the last token is a whole page).
  auto fin = t.cache_finished_req(tokens, kv, prefix, m.last_node);
  CHECK(fin.to_free == (page > 1 ? V{kv.back()} : V{}));
  CHECK(t.protected_size() == 0);
  CHECK(t.total_size() == 7 * page + (page > 1 ? 0 : 1));
  require_sound(t);
}

TEST_CASE("Eviction order follows the logical clock, equal times go by node index", "[kvstore][radix]") {
  RadixCache t(1);
  // Two leaves created by one insert each, then a split that makes a third.
  t.insert(V{1, 2, 3}, V{11, 12, 13});  // clock 1
  t.insert(V{4, 5}, V{14, 15});         // clock 2
  t.insert(V{1, 2, 6}, V{11, 12, 16});  // clock 3: [1,2] split off; [3] keeps time 3? no: it was touched
  // [3] was touched by the third insert's walk (time 3) and [6] is new (time 3):
  // the oldest leaf is [4,5].
  CHECK(t.evict(1) == V{14, 15});
  // [3] and [6] share time 3: the lower node index (the older storage, [3]) goes first.
  CHECK(t.evict(1) == V{13});
  // Matching [1,2] refreshes the inner node, not the leaf below it.
  t.match_prefix(V{1, 2});
  auto leaf = t.match_prefix(V{1, 2, 6}).last_node;  // before reading the clock it advances
  CHECK(t.node_info(leaf).last_access == t.clock());
  CHECK(t.evict(1) == V{16});
  CHECK(t.evict(1) == V{11, 12});  // the inner node became a leaf
  CHECK(t.total_size() == 0);
  require_sound(t);
}

TEST_CASE("A parent with a locked child is not evicted, even when unlocked leaves are", "[kvstore][radix]") {
  RadixCache t(1);
  t.insert(V{1, 2, 3, 4}, V{1, 2, 3, 4});
  t.insert(V{1, 2, 7, 8}, V{1, 2, 7, 8});
  t.insert(V{9}, V{9});
  auto m = t.match_prefix(V{1, 2, 3, 4});
  t.inc_lock_ref(m.last_node);
  auto freed = t.evict(1000);
  std::sort(freed.begin(), freed.end());
  CHECK(freed == V{7, 8, 9});
  CHECK(t.total_size() == 4);
  CHECK(t.protected_size() == 4);
  CHECK(t.evict(1000).empty());
  require_sound(t);
}

TEST_CASE("Disabled cache: locks are no-ops, unfinished requests keep everything", "[kvstore][radix]") {
  RadixCache t(4, /*disabled=*/true);
  CHECK(t.inc_lock_ref(RadixCache::root_id) == 0);
  CHECK(t.dec_lock_ref(RadixCache::root_id) == 0);
  V tokens{1, 2, 3, 4, 5};
  V kv{4, 5, 6, 7, 8};
  auto res = t.cache_unfinished_req(tokens, kv, 0, RadixCache::root_id);
  CHECK(res.to_free.empty());
  CHECK(res.new_prefix_len == 0);
  CHECK(t.release_req(kv, 0, RadixCache::root_id) == kv);
  CHECK_THROWS_AS(t.cache_finished_req(tokens, kv, 4, RadixCache::root_id), KvStoreError);
  CHECK(t.evict(10).empty());
  CHECK(t.check_integrity().empty());
}
