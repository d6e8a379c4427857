// Reusing a cached prefix is exact: a request that attends to another
// request's KV rows for its first s tokens gets the same logits as one that
// computed everything itself.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "kvstore/token_to_kv_pool_allocator.hpp"
#include "tests/model/model_test_support.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

// The request token ids of a real sentence (ids from the model's vocabulary).
const Ids prompt{504, 3575, 282, 4649, 314, 7042, 30, 198, 198, 504, 1797, 1918, 553, 253, 2155, 282, 4723,
                 216, 35, 33, 33, 28, 905, 2411, 314, 2040, 1083, 282, 260, 2254, 30, 378, 1210, 314, 3134,
                 3117, 284, 260, 3213, 1253};

float max_abs_diff(const float* a, const float* b, int32_t n) {
  float m = 0;
  for (int32_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// Allocates and frees pages at random so later allocations are scattered.
void fragment(TokenToKVPoolAllocator& a, std::mt19937& rng) {
  auto rows = *a.alloc(a.capacity() / 2);
  std::vector<int32_t> keep;
  std::vector<int32_t> drop;
  for (size_t i = 0; i < rows.size(); i += static_cast<size_t>(a.page_size())) {
    ((rng() % 2) ? keep : drop).push_back(rows[i]);
  }
  a.free(drop);
  (void)keep;  // the rest stay taken, leaving holes
}

}  // namespace

TEST_CASE("Logits from a cached prefix equal logits computed from scratch", "[model][prefix]") {
  ModelRunner& r = test::default_runner();
  const int32_t vocab = r.model_config().vocab_size;
  const auto n = static_cast<int32_t>(prompt.size());

  std::vector<int32_t> rows(prompt.size());
  std::iota(rows.begin(), rows.end(), 1);
  auto scratch = test::run_request(r, 0, rows, 0, prompt);
  std::vector<float> want(scratch.row(0), scratch.row(0) + vocab);

  int32_t page = GENERATE(1, 4, 16);
  int32_t split = GENERATE(1, 7, 16, 33);
  INFO("page " << page << ", split " << split);
  std::mt19937 rng(static_cast<unsigned>(page * 100 + split));
  TokenToKVPoolAllocator alloc(2048, page);
  fragment(alloc, rng);

  // Request A (slot 1) computes the first `split` tokens.
  Ids prefix(prompt.begin(), prompt.begin() + split);
  auto a_rows = *alloc.alloc_extend(std::vector<int32_t>{0}, std::vector<int32_t>{split}, std::vector<int32_t>{-1});
  test::run_request(r, 1, a_rows, 0, prefix);

  // Request B (slot 2) shares A's rows for the prefix and computes the rest.
  auto b_new = *alloc.alloc_extend(std::vector<int32_t>{split}, std::vector<int32_t>{n},
                                   std::vector<int32_t>{a_rows.back()});
  std::vector<int32_t> b_rows = a_rows;
  b_rows.insert(b_rows.end(), b_new.begin(), b_new.end());
  Ids rest(prompt.begin() + split, prompt.end());
  auto reused = test::run_request(r, 2, b_rows, split, rest);
  float diff = max_abs_diff(reused.row(0), want.data(), vocab);
  INFO("max |logit difference| " << diff);
  CHECK(diff <= 1e-4f);
  CHECK(test::argmax(reused.row(0), vocab) == test::argmax(want.data(), vocab));
}

TEST_CASE("A batch mixing prefill, prefix-extend and decode gives each request its solo logits", "[model][batch]") {
  ModelRunner& r = test::default_runner();
  const int32_t vocab = r.model_config().vocab_size;
  Ids p1(prompt.begin(), prompt.begin() + 12), p2(prompt.begin() + 5, prompt.begin() + 30);
  // Solo references, each in its own rows.
  std::vector<int32_t> rows1(40), rows2(40), rows3(40);
  std::iota(rows1.begin(), rows1.end(), 100);
  std::iota(rows2.begin(), rows2.end(), 200);
  std::iota(rows3.begin(), rows3.end(), 300);
  auto solo1 = test::run_request(r, 0, rows1, 0, p1);
  std::vector<float> want1(solo1.row(0), solo1.row(0) + vocab);
  // Request 2 prefilled 24 tokens earlier; its solo next step decodes token 25.
  test::run_request(r, 1, rows2, 0, Ids(p2.begin(), p2.end() - 1));
  auto solo2 = test::run_request(r, 1, rows2, 24, Ids{p2.back()});
  std::vector<float> want2(solo2.row(0), solo2.row(0) + vocab);
  // Request 3 extends 20 tokens on a 10-token prefix it computed earlier.
  Ids p3(prompt.begin() + 10, prompt.begin() + 40);
  test::run_request(r, 3, rows3, 0, Ids(p3.begin(), p3.begin() + 10));
  auto solo3 = test::run_request(r, 3, rows3, 10, Ids(p3.begin() + 10, p3.end()));
  std::vector<float> want3(solo3.row(0), solo3.row(0) + vocab);

  // All three in one batch, in other slots, rows rewritten by the batch.
  ForwardBatch b;
  b.reqs = {{4, 0, 12}, {5, 24, 1}, {6, 10, 20}};
  b.token_ids = p1;
  b.token_ids.push_back(p2.back());
  b.token_ids.insert(b.token_ids.end(), p3.begin() + 10, p3.end());
  b.out_cache_loc.assign(rows1.begin(), rows1.begin() + 12);
  b.out_cache_loc.push_back(rows2[24]);
  b.out_cache_loc.insert(b.out_cache_loc.end(), rows3.begin() + 10, rows3.begin() + 30);
  b.writes = {{4, 0, Ids(rows1.begin(), rows1.begin() + 12)},
              {5, 0, Ids(rows2.begin(), rows2.begin() + 25)},
              {6, 0, Ids(rows3.begin(), rows3.begin() + 30)}};
  auto out = r.forward(b);
  REQUIRE(out.rows() == 3);
  CHECK(max_abs_diff(out.row(0), want1.data(), vocab) <= 1e-4f);
  CHECK(max_abs_diff(out.row(1), want2.data(), vocab) <= 1e-4f);
  CHECK(max_abs_diff(out.row(2), want3.data(), vocab) <= 1e-4f);
}
