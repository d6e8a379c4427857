#include "kvstore/token_to_kv_pool_allocator.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <span>
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

TEST_CASE("Rows freed together come back in ascending runs", "[kvstore]") {
  // A request's rows in one upward run move between nodes and tiers as one
  // copy per layer; in the order they were freed they would go one by one.
  int32_t page = GENERATE(1, 4);
  TokenToKVPoolAllocator a(64 * page, page);
  auto first = *a.alloc(40 * page);
  auto keep = *a.alloc(8 * page);
  // Freed out of order and in two calls, as a cache lets go of them.
  std::reverse(first.begin(), first.end());
  a.free(std::span(first).subspan(0, 20 * page));
  a.free(std::span(first).subspan(20 * page));
  auto again = *a.alloc(20 * page);
  for (size_t i = 1; i < again.size(); ++i) CHECK(again[i] == again[i - 1] + 1);
  auto rest = *a.alloc(20 * page);
  for (size_t i = 1; i < rest.size(); ++i) CHECK(rest[i] == rest[i - 1] + 1);
  CHECK(a.check_integrity().empty());
}

TEST_CASE("Allocator rejects bad construction", "[kvstore]") {
  CHECK_THROWS_AS(TokenToKVPoolAllocator(100, 0), KvStoreError);
  CHECK_THROWS_AS(TokenToKVPoolAllocator(3, 4), KvStoreError);   // less than one page
  CHECK_THROWS_AS(TokenToKVPoolAllocator(-8, 1), KvStoreError);
  CHECK_THROWS_AS(TokenToKVPoolAllocator(int64_t{1} << 40, 16), KvStoreError);  // rows must fit int32
  TokenToKVPoolAllocator a(17, 4);
  CHECK(a.capacity() == 16);
  CHECK_THROWS_AS(a.alloc(-1), KvStoreError);
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
    // seq_len counts the new token: the request grows from len to len + 1.
    auto next = a.alloc_decode(Rows{len + 1}, Rows{rows.back()});
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
  CHECK(a.check_integrity().empty());
}

TEST_CASE("Batch decode needs pages only for full last pages and is all-or-nothing", "[kvstore]") {
  TokenToKVPoolAllocator a(16, 4);  // pages 1..4
  auto full = *a.alloc(4);          // request A: 4 tokens, its page is full
  auto part = *a.alloc(3);          // request B: 3 tokens, one row left in its page
  auto other = *a.alloc(8);         // two more pages: the pool is now empty
  CHECK(a.free_pages() == 0);
  // B fits in place, A needs a page: the batch cannot be served, and nothing
  // is taken (B's in-place row stays unused).
  CHECK_FALSE(a.can_alloc_decode(Rows{5, 4}));
  CHECK_FALSE(a.alloc_decode(Rows{5, 4}, Rows{full.back(), part.back()}));
  CHECK(a.can_alloc_decode(Rows{4}));
  auto b = a.alloc_decode(Rows{4}, Rows{part.back()});
  REQUIRE(b);
  CHECK(*b == Rows{part.back() + 1});
  a.free(other);
  CHECK(a.can_alloc_decode(Rows{5}));
  auto na = a.alloc_decode(Rows{5}, Rows{full.back()});
  REQUIRE(na);
  CHECK((*na)[0] % 4 == 0);  // first row of a fresh page
  CHECK_THROWS_AS(a.alloc_decode(Rows{0}, Rows{-1}), KvStoreError);  // seq_len counts the new token
  CHECK_THROWS_AS(a.can_alloc_decode(Rows{0}), KvStoreError);
  CHECK(a.check_integrity().empty());
}

TEST_CASE("Chunked extends of interleaved requests keep each request's pages its own", "[kvstore]") {
  int32_t page = GENERATE(1, 4, 16);
  TokenToKVPoolAllocator a(128 * page, page);  // 94 tokens need at most 94 pages
  // Three requests grow in uneven chunks, batched together.
  std::vector<Rows> rows(3);
  const int32_t chunks[][3] = {{5, 1, 17}, {0, 3, 2}, {9, 16, 1}, {1, 1, 1}, {30, 0, 7}};
  for (const auto& chunk : chunks) {
    Rows prefix, seq, last;
    for (size_t r = 0; r < 3; ++r) {
      prefix.push_back(static_cast<int32_t>(rows[r].size()));
      seq.push_back(prefix.back() + chunk[r]);
      last.push_back(rows[r].empty() ? -1 : rows[r].back());
    }
    int64_t pages = a.pages_needed(prefix, seq);
    int64_t before = a.free_pages();
    REQUIRE(a.can_alloc_extend(prefix, seq));
    auto got = a.alloc_extend(prefix, seq, last);
    REQUIRE(got);
    CHECK(a.free_pages() == before - pages);  // the "can" arithmetic is what was taken
    size_t at = 0;
    for (size_t r = 0; r < 3; ++r) {
      for (int32_t i = 0; i < chunk[r]; ++i) rows[r].push_back((*got)[at++]);
    }
    CHECK(at == got->size());
  }
  std::set<int32_t> all;
  std::vector<std::set<int32_t>> pages_of(3);
  for (size_t r = 0; r < 3; ++r) {
    for (size_t pos = 0; pos < rows[r].size(); ++pos) {
      int32_t row = rows[r][pos];
      CHECK(row >= page);                                      // never the reserved page
      CHECK(row % page == static_cast<int32_t>(pos) % page);   // offset in page == position in page
      if (pos % static_cast<size_t>(page) != 0) CHECK(row == rows[r][pos - 1] + 1);  // a page is filled in order
      CHECK(all.insert(row).second);
      pages_of[r].insert(row / page);
    }
    CHECK(static_cast<int64_t>(pages_of[r].size()) ==
          (static_cast<int64_t>(rows[r].size()) + page - 1) / page);
  }
  for (int32_t p : pages_of[0]) CHECK((pages_of[1].count(p) + pages_of[2].count(p)) == 0);
  for (int32_t p : pages_of[1]) CHECK(pages_of[2].count(p) == 0);
  // Freeing each request's rows returns exactly its pages.
  int64_t before = a.free_pages();
  a.free(rows[1]);
  CHECK(a.free_pages() == before + static_cast<int64_t>(pages_of[1].size()));
  CHECK_THROWS_AS(a.free(Rows{rows[1].front()}), KvStoreError);
  a.free(rows[0]);
  a.free(rows[2]);
  CHECK(a.available_size() == a.capacity());
  CHECK(a.check_integrity().empty());
}

TEST_CASE("Exhaustion fails without a partial allocation at every page size", "[kvstore]") {
  int32_t page = GENERATE(1, 4, 16);
  TokenToKVPoolAllocator a(8 * page, page);
  // 5 pages; at page sizes > 1 the last one is short by a row.
  auto held = *a.alloc(page == 1 ? 5 : 5 * page - 1);
  CHECK(a.free_pages() == 3);
  CHECK_FALSE(a.can_alloc(3 * page + 1));
  CHECK_FALSE(a.alloc(3 * page + 1));
  // Growing the held request to 8 pages: its partial page absorbs a row,
  // then exactly the 3 free pages are needed. With one more request in the
  // batch it does not fit, and the batch takes nothing.
  auto len = static_cast<int32_t>(held.size());
  CHECK(a.pages_needed(Rows{len}, Rows{8 * page}) == 3);
  CHECK_FALSE(a.can_alloc_extend(Rows{len, 0}, Rows{8 * page, 1}));
  CHECK_FALSE(a.alloc_extend(Rows{len, 0}, Rows{8 * page, 1}, Rows{held.back(), -1}));
  CHECK(a.free_pages() == 3);
  auto ok = a.alloc_extend(Rows{len}, Rows{8 * page}, Rows{held.back()});
  REQUIRE(ok);
  CHECK(ok->size() == static_cast<size_t>(8 * page - len));
  if (page > 1) CHECK(ok->front() == held.back() + 1);
  CHECK(a.free_pages() == 0);
  CHECK_FALSE(a.alloc(1));
  CHECK(a.alloc(0));  // nothing asked, nothing needed
  CHECK(a.check_integrity().empty());
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
