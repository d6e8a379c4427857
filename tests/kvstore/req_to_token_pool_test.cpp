#include "kvstore/req_to_token_pool.hpp"

#include <catch2/catch.hpp>
#include <vector>

#include "kvstore/kv_error.hpp"

using actorlm::KvStoreError;
using actorlm::ReqToTokenPool;

TEST_CASE("ReqToTokenPool allocates distinct slots all-or-nothing", "[kvstore]") {
  ReqToTokenPool pool(4, 16);
  auto a = pool.alloc(3);
  REQUIRE(a);
  CHECK(*a == std::vector<int32_t>{0, 1, 2});
  CHECK(pool.available_size() == 1);
  CHECK_FALSE(pool.alloc(2));  // only one left: nothing taken
  CHECK(pool.available_size() == 1);
  pool.free(1);
  auto b = pool.alloc(2);
  REQUIRE(b);
  CHECK(pool.available_size() == 0);
  CHECK(pool.in_use(1));
}

TEST_CASE("ReqToTokenPool writes and reads a row", "[kvstore]") {
  ReqToTokenPool pool(2, 8);
  int32_t slot = (*pool.alloc(1))[0];
  std::vector<int32_t> kv{11, 12, 13};
  pool.write(slot, 2, kv);
  pool.write(slot, 0, std::vector<int32_t>{9, 10});
  auto row = pool.read(slot, 5);
  CHECK(std::vector<int32_t>(row.begin(), row.end()) == std::vector<int32_t>{9, 10, 11, 12, 13});
}

TEST_CASE("ReqToTokenPool rejects misuse with an error", "[kvstore]") {
  ReqToTokenPool pool(2, 4);
  CHECK_THROWS_AS(pool.free(0), KvStoreError);  // never allocated
  int32_t slot = (*pool.alloc(1))[0];
  CHECK_THROWS_AS(pool.write(slot, 3, std::vector<int32_t>{1, 2}), KvStoreError);  // past the row
  CHECK_THROWS_AS(pool.write(slot, -1, std::vector<int32_t>{1}), KvStoreError);
  CHECK_THROWS_AS(pool.read(slot, 5), KvStoreError);
  CHECK_THROWS_AS(pool.free(7), KvStoreError);
  pool.free(slot);
  CHECK_THROWS_AS(pool.free(slot), KvStoreError);  // double free
  CHECK_THROWS_AS(pool.write(slot, 0, std::vector<int32_t>{1}), KvStoreError);
  CHECK_THROWS_AS(ReqToTokenPool(0, 4), KvStoreError);
}
