#include "kvstore/token_to_kv_pool_allocator.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "kvstore/kv_error.hpp"

using actorlm::KvStoreError;
using actorlm::TokenToKVPoolAllocator;
using Rows = std::vector<int32_t>;

TEST_CASE("Allocator reserves page 0 and rounds capacity to pages", "[kvstore]") {
  int32_t page = GENERATE(1, 4, 16);
  TokenToKVPoolAllocator a(100, page);
  CHECK(a.capacity() == 100 / page * page);
  CHECK(a.pool_rows() == a.capacity() + page);
  auto rows = a.alloc(a.capacity());
  REQUIRE(rows);
  std::set<int32_t> distinct(rows->begin(), rows->end());
  CHECK(distinct.size() == rows->size());
  CHECK(*distinct.begin() >= page);  // nothing in the reserved page
  CHECK(*distinct.rbegin() < a.pool_rows());
  CHECK(a.available_size() == 0);
  CHECK_FALSE(a.alloc(1));
  CHECK(a.check_integrity().empty());
}

TEST_CASE("Extend fills the partial last page before taking new pages", "[kvstore]") {
  TokenToKVPoolAllocator a(64, 4);
  // Request 0: 6 tokens -> pages 1 (rows 4..7) and 2 (rows 8, 9).
  auto first = a.alloc_extend(Rows{0}, Rows{6}, Rows{-1});
  REQUIRE(first);
  CHECK(*first == Rows{4, 5, 6, 7, 8, 9});
  // Grow to 11: rows 10, 11 finish page 2, then page 3 (12, 13, 14).
  auto more = a.alloc_extend(Rows{6}, Rows{11}, Rows{9});
  REQUIRE(more);
  CHECK(*more == Rows{10, 11, 12, 13, 14});
  CHECK(a.free_pages() == 16 - 3);
}

TEST_CASE("Batch extend is all-or-nothing", "[kvstore]") {
  TokenToKVPoolAllocator a(16, 4);  // 4 pages
  CHECK(a.pages_needed(Rows{0, 0}, Rows{8, 9}) == 5);
  CHECK_FALSE(a.can_alloc_extend(Rows{0, 0}, Rows{8, 9}));
  CHECK_FALSE(a.alloc_extend(Rows{0, 0}, Rows{8, 9}, Rows{-1, -1}));
  CHECK(a.free_pages() == 4);
  auto ok = a.alloc_extend(Rows{0, 0}, Rows{8, 8}, Rows{-1, -1});
  REQUIRE(ok);
  CHECK(ok->size() == 16);
  CHECK(a.free_pages() == 0);
}

TEST_CASE("Decode takes a new page only at page boundaries", "[kvstore]") {
  int32_t page = GENERATE(1, 4, 16);
  TokenToKVPoolAllocator a(256, page);
  auto rows = *a.alloc_extend(Rows{0}, Rows{3}, Rows{-1});
  int32_t len = 3;
  for (int step = 0; step < 40; ++step) {
    int64_t before = a.free_pages();
    auto next = a.alloc_decode(Rows{len}, Rows{rows.back()});
    REQUIRE(next);
    REQUIRE(next->size() == 1);
    bool boundary = len % page == 0;
    CHECK(a.free_pages() == before - (boundary ? 1 : 0));
    if (!boundary) CHECK((*next)[0] == rows.back() + 1);
    CHECK((*next)[0] % page == len % page);  // position-consistent row within its page
    rows.push_back((*next)[0]);
    ++len;
  }
  std::set<int32_t> distinct(rows.begin(), rows.end());
  CHECK(distinct.size() == rows.size());
}

TEST_CASE("Free returns whole pages and detects double frees", "[kvstore]") {
  TokenToKVPoolAllocator a(32, 4);
  auto rows = *a.alloc(10);  // pages 1, 2, 3 (third partly used)
  CHECK(a.free_pages() == 5);
  a.free(Rows(rows.begin() + 8, rows.end()));  // two rows of page 3 return the page
  CHECK(a.free_pages() == 6);
  CHECK_THROWS_AS(a.free(Rows{rows[8]}), KvStoreError);  // page 3 already free
  CHECK_THROWS_AS(a.free(Rows{0}), KvStoreError);         // reserved page
  CHECK_THROWS_AS(a.free(Rows{1000}), KvStoreError);      // out of range
  // A failing free frees nothing, even when some of its rows were valid.
  CHECK_THROWS_AS(a.free(Rows{rows[0], rows[9]}), KvStoreError);
  CHECK(a.free_pages() == 6);
  a.free(Rows(rows.begin(), rows.begin() + 8));
  CHECK(a.free_pages() == 8);
  CHECK(a.check_integrity().empty());
}

TEST_CASE("Extend rejects a last_loc the request cannot own", "[kvstore]") {
  TokenToKVPoolAllocator a(32, 4);
  auto rows = *a.alloc(2);  // rows 4, 5 at positions 0, 1
  CHECK_THROWS_AS(a.alloc_extend(Rows{2}, Rows{3}, Rows{6}), KvStoreError);   // wrong in-page offset
  CHECK_THROWS_AS(a.alloc_extend(Rows{2}, Rows{3}, Rows{13}), KvStoreError);  // free page
  CHECK_THROWS_AS(a.alloc_extend(Rows{3}, Rows{2}, Rows{5}), KvStoreError);   // shrinking
  CHECK(a.free_pages() == 7);
  auto ok = a.alloc_extend(Rows{2}, Rows{3}, Rows{rows[1]});
  REQUIRE(ok);
  CHECK(*ok == Rows{6});
}
