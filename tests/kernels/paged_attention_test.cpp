// The register-blocked attention kernels (AVX2 and AVX-512, each where the
// CPU has it) give the per-query kernels' results bit for bit: same scores, same softmax, same value sums,
// for any head size (whole 16s, a remainder, under 16), group size, cache
// type, sliding window and softcap, in prefill, extend and decode batches.
// (Closeness to a dense double-free reference: cpu_backend_test.)

#include "kernels/cpu/paged_attention.hpp"
#include "kernels/half.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

using namespace actorlm;

TEST_CASE("Blocked attention equals per-query attention bit for bit", "[kernels][attention]") {
  const cpu::Isa isa = GENERATE(cpu::Isa::avx2, cpu::Isa::avx512_vnni);
  if (!cpu::isa_available(isa)) {
    WARN("no " << cpu::isa_name(isa) << " on this CPU: its blocked kernels are not used here");
    return;
  }
  struct Shape {
    int heads, kv_heads, hd;
  };
  const Shape shape = GENERATE(Shape{9, 3, 64}, Shape{32, 8, 128}, Shape{4, 4, 80}, Shape{6, 2, 72}, Shape{8, 2, 8},
                               Shape{5, 1, 16});
  const bool f16 = GENERATE(false, true);
  const LayerAttention layer = GENERATE(LayerAttention{}, LayerAttention{100, 0.0f}, LayerAttention{600, 5.0f});
  INFO(cpu::isa_name(isa) << ", heads " << shape.heads << "/" << shape.kv_heads << ", head_dim " << shape.hd << (f16 ? ", f16" : ", float32")
                << ", window " << layer.sliding_window << ", softcap " << layer.softcap);
  std::mt19937 rng(11 + static_cast<unsigned>(shape.heads * 7 + shape.hd));
  std::normal_distribution<float> normal(0.0f, 1.0f);

  // Requests: a long prefill after a cached prefix, a fresh prefill whose
  // length is no multiple of the tile, decodes around block and chunk edges,
  // an extend across a chunk boundary.
  const std::vector<int> prefix{37, 0, 250, 63, 511, 1500, 500}, qlen{20, 13, 1, 1, 2, 1, 30};
  const int64_t pool_rows = 3000;  // 2,929 positions in all
  const int64_t kv_row = int64_t(shape.kv_heads) * shape.hd;
  std::vector<float> k(pool_rows * kv_row), v(k.size());
  std::vector<uint16_t> k16(k.size()), v16(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = normal(rng);
    v[i] = normal(rng);
    k16[i] = f32_to_f16(k[i]);
    v16[i] = f32_to_f16(v[i]);
  }
  KvLayerView cache{k.data(), v.data(), pool_rows, shape.kv_heads, shape.hd};
  if (f16) cache = {nullptr, nullptr, pool_rows, shape.kv_heads, shape.hd, k16.data(), v16.data()};

  std::vector<int32_t> free_rows(static_cast<size_t>(pool_rows - 1));
  std::iota(free_rows.begin(), free_rows.end(), 1);
  std::shuffle(free_rows.begin(), free_rows.end(), rng);
  AttentionPlan plan;
  plan.n_heads = shape.heads;
  plan.n_kv_heads = shape.kv_heads;
  plan.head_dim = shape.hd;
  plan.scale = 1.0f / std::sqrt(float(shape.hd));
  plan.kv_indptr.push_back(0);
  size_t next = 0;
  int q_rows = 0;
  for (size_t r = 0; r < prefix.size(); ++r) {
    plan.q_start.push_back(q_rows);
    plan.q_len.push_back(qlen[r]);
    plan.prefix_len.push_back(prefix[r]);
    for (int p = 0; p < prefix[r] + qlen[r]; ++p) plan.kv_indices.push_back(free_rows[next++]);
    plan.kv_indptr.push_back(static_cast<int32_t>(plan.kv_indices.size()));
    q_rows += qlen[r];
  }
  std::vector<float> q(static_cast<size_t>(q_rows) * shape.heads * shape.hd);
  for (float& x : q) x = normal(rng);

  cpu::ThreadPool pool(2);
  std::vector<float> blocked(q.size()), per_query(q.size());
  cpu::paged_attention(q.data(), cache, plan, layer, blocked.data(), pool, isa);
  cpu::paged_attention(q.data(), cache, plan, layer, per_query.data(), pool, cpu::Isa::portable);
  REQUIRE(std::all_of(blocked.begin(), blocked.end(), [](float x) { return std::isfinite(x); }));
  // memcmp, not ==: the same bits, signed zeros included.
  CHECK(std::memcmp(blocked.data(), per_query.data(), blocked.size() * sizeof(float)) == 0);

  // One long decode alone: split over the KV sequence across threads.
  AttentionPlan one = plan;
  one.q_start = {0};
  one.q_len = {1};
  one.prefix_len = {prefix[5]};
  one.kv_indices.assign(plan.kv_indices.begin() + plan.kv_indptr[5], plan.kv_indices.begin() + plan.kv_indptr[6]);
  one.kv_indptr = {0, static_cast<int32_t>(one.kv_indices.size())};
  const auto row = static_cast<size_t>(shape.heads * shape.hd);
  std::vector<float> q_one(q.begin() + static_cast<ptrdiff_t>(plan.q_start[5] * row),
                           q.begin() + static_cast<ptrdiff_t>((plan.q_start[5] + 1) * row));
  std::vector<float> a(row), b(row);
  cpu::paged_attention(q_one.data(), cache, one, layer, a.data(), pool, isa);
  cpu::paged_attention(q_one.data(), cache, one, layer, b.data(), pool, cpu::Isa::portable);
  CHECK(std::memcmp(a.data(), b.data(), row * sizeof(float)) == 0);
  CHECK(std::memcmp(a.data(), blocked.data() + plan.q_start[5] * row, row * sizeof(float)) == 0);
}
