#include "kernels/cpu/paged_attention.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace actorlm::cpu {
namespace {

constexpr int32_t key_block = 64;     // keys per online-softmax step
constexpr int32_t chunk_keys = 512;   // keys per partial (a multiple of key_block)
constexpr int32_t tile_positions = 8; // query positions per task

// exp(x) for finite x <= 0 (a score minus the running max): x = n ln2 + r
// with n = round(x / ln2) and r = x - n ln2 in two steps (ln2 split in a
// high part whose product with n is exact and a low part), then 2^n into the
// exponent bits times e^r, |r| <= 0.35, by a degree-7 Taylor polynomial:
// within 1e-7 relative of exp (measured 7.5e-8 over [-87, 0]). A cruder
// version (2^(x log2 e) with the product rounded first, 1.2e-6) cost 0.6% of
// teacher-forced agreement with llama.cpp. Inputs below -87 give ~1e-38,
// which changes nothing it is added to. Written so that loops over it
// vectorize (std::exp does not).
inline float exp_nonpositive(float x) {
  x = x > -87.0f ? x : -87.0f;
  // Round to nearest by the 1.5 * 2^23 trick (|x / ln2| < 2^22 here).
  const float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
  float r = std::fma(n, -0.693145752f, x);
  r = std::fma(n, -1.42860677e-6f, r);
  const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
                                                                   r * (1.0f / 720 + r * (1.0f / 5040)))))));
  // n in [-126, 0]: adding n to the exponent field (in unsigned arithmetic,
  // so a negative n wraps instead of shifting a negative value).
  return std::bit_cast<float>(std::bit_cast<uint32_t>(p) + (static_cast<uint32_t>(static_cast<int32_t>(n)) << 23));
}

float dot(const float* a, const float* b, int32_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int32_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// One query's softmax state over some keys: max score, sum of exp(score -
// max), and the exp-weighted sum of V rows. A non-finite score marks it bad
// (its output becomes NaN, as float32 attention would give NaN or inf).
struct State {
  float m = -INFINITY, l = 0.0f;
  bool bad = false;
  float* acc = nullptr;  // head_dim values
};

void reset(State& s, int32_t hd) {
  s.m = -INFINITY;
  s.l = 0.0f;
  s.bad = false;
  std::fill(s.acc, s.acc + hd, 0.0f);
}

// s = fold(s, other): the two key sets' softmax states combined. Folding a
// state into an empty one copies it exactly (exp(0) is 1).
void fold(State& s, const State& other, int32_t hd) {
  s.bad |= other.bad;
  const float m = std::max(s.m, other.m);
  const float a = exp_nonpositive(s.m - m), b = exp_nonpositive(other.m - m);
  s.l = s.l * a + other.l * b;
#pragma omp simd
  for (int32_t d = 0; d < hd; ++d) s.acc[d] = s.acc[d] * a + other.acc[d] * b;
  s.m = m;
}

struct Geometry {
  const KvLayerView* cache;
  int64_t kv_row;
  int32_t hd;
  float scale;
};

// Keys [k0, k1) (positions of one request, rows from its kv_indices) into a
// fresh state for one query vector, in blocks of key_block starting at k0.
void attend_chunk(const Geometry& g, const float* qv, const int32_t* rows, int32_t kvh, int32_t k0, int32_t k1,
                  State& s, float* scores) {
  const float* kbase = g.cache->k + static_cast<int64_t>(kvh) * g.hd;
  const float* vbase = g.cache->v + static_cast<int64_t>(kvh) * g.hd;
  for (int32_t b0 = k0; b0 < k1; b0 += key_block) {
    const int32_t n = std::min(key_block, k1 - b0);
    float block_max = -INFINITY;
    bool finite = true;
    for (int32_t j = 0; j < n; ++j) {
      const float v = dot(qv, kbase + rows[b0 + j] * g.kv_row, g.hd) * g.scale;
      scores[j] = v;
      finite &= std::isfinite(v);
      block_max = std::max(block_max, v);
    }
    if (!finite) {
      s.bad = true;
      continue;
    }
    const float m = std::max(s.m, block_max);
    const float alpha = exp_nonpositive(s.m - m);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int32_t j = 0; j < n; ++j) {
      scores[j] = exp_nonpositive(scores[j] - m);
      sum += scores[j];
    }
    s.l = s.l * alpha + sum;
#pragma omp simd
    for (int32_t d = 0; d < g.hd; ++d) s.acc[d] *= alpha;
    for (int32_t j = 0; j < n; ++j) {
      const float p = scores[j];
      const float* vr = vbase + rows[b0 + j] * g.kv_row;
#pragma omp simd
      for (int32_t d = 0; d < g.hd; ++d) s.acc[d] += p * vr[d];
    }
    s.m = m;
  }
}

void write_output(const State& s, float* o, int32_t hd) {
  const float inv = 1.0f / s.l;
  for (int32_t d = 0; d < hd; ++d) o[d] = s.bad ? NAN : s.acc[d] * inv;
}

// Up to tile_positions query positions of one request and the query heads
// of one KV head.
struct Tile {
  int32_t req, kvh, first, count;  // queries first..first+count-1 of the request
  int32_t chunks;                  // chunks its last query sees
};

}  // namespace

void paged_attention(const float* q, const KvLayerView& cache, const AttentionPlan& plan, float* out,
                     ThreadPool& pool) {
  const int32_t hd = plan.head_dim;
  const int32_t group = plan.n_heads / plan.n_kv_heads;
  const int64_t q_row = static_cast<int64_t>(plan.n_heads) * hd;
  const Geometry g{&cache, static_cast<int64_t>(plan.n_kv_heads) * hd, hd, plan.scale};
  for (int32_t idx : plan.kv_indices) {
    if (idx < 0 || idx >= cache.pool_rows) {
      throw std::out_of_range("attention plan names KV row " + std::to_string(idx) + " outside the pool");
    }
  }
  std::vector<Tile> tiles;
  for (int32_t r = 0; r < static_cast<int32_t>(plan.q_len.size()); ++r) {
    const int32_t len = plan.q_len[static_cast<size_t>(r)], prefix = plan.prefix_len[static_cast<size_t>(r)];
    for (int32_t first = 0; first < len; first += tile_positions) {
      const int32_t count = std::min(tile_positions, len - first);
      const int32_t visible = prefix + first + count;
      for (int32_t kvh = 0; kvh < plan.n_kv_heads; ++kvh) {
        tiles.push_back({r, kvh, first, count, (visible + chunk_keys - 1) / chunk_keys});
      }
    }
  }
  const int32_t per_tile = tile_positions * group;  // query vectors of a full tile

  // Query i of a tile: position first + i / group, head kvh * group + i % group.
  auto query = [&](const Tile& t, int32_t i, const float** qv, float** o, int32_t* visible) {
    const int32_t j = t.first + i / group;
    const int64_t row = plan.q_start[static_cast<size_t>(t.req)] + j;
    const int64_t head = static_cast<int64_t>(t.kvh) * group + i % group;
    *qv = q + row * q_row + head * hd;
    *o = out + row * q_row + head * hd;
    *visible = plan.prefix_len[static_cast<size_t>(t.req)] + j + 1;
  };
  auto rows_of = [&](const Tile& t) {
    return plan.kv_indices.data() + plan.kv_indptr[static_cast<size_t>(t.req)];
  };
  // The partial of one chunk for every query of a tile into states[i].
  auto chunk_states = [&](const Tile& t, int32_t c, std::vector<State>& states, float* scores) {
    const int32_t n = t.count * group;
    for (int32_t i = 0; i < n; ++i) reset(states[static_cast<size_t>(i)], hd);
    const int32_t k0 = c * chunk_keys;
    // Key blocks outer, queries inner: a block's K/V rows stay in cache for
    // every query of the tile; each query still sees its blocks in order.
    for (int32_t b0 = k0; b0 < k0 + chunk_keys; b0 += key_block) {
      bool any = false;
      for (int32_t i = 0; i < n; ++i) {
        const float* qv;
        float* o;
        int32_t visible;
        query(t, i, &qv, &o, &visible);
        if (b0 >= visible) continue;
        any = true;
        attend_chunk(g, qv, rows_of(t), t.kvh, b0, std::min(b0 + key_block, visible),
                     states[static_cast<size_t>(i)], scores);
      }
      if (!any) break;
    }
  };

  const bool split = static_cast<int64_t>(tiles.size()) < 2 * pool.size();
  if (!split) {
    pool.parallel_for(static_cast<int64_t>(tiles.size()), [&](int64_t begin, int64_t end) {
      std::vector<float> buf(static_cast<size_t>(2 * per_tile * hd + key_block));
      std::vector<State> total(static_cast<size_t>(per_tile)), part(static_cast<size_t>(per_tile));
      for (int32_t i = 0; i < per_tile; ++i) {
        total[static_cast<size_t>(i)].acc = buf.data() + static_cast<int64_t>(i) * hd;
        part[static_cast<size_t>(i)].acc = buf.data() + static_cast<int64_t>(per_tile + i) * hd;
      }
      float* scores = buf.data() + 2 * per_tile * hd;
      for (int64_t ti = begin; ti < end; ++ti) {
        const Tile& t = tiles[static_cast<size_t>(ti)];
        const int32_t n = t.count * group;
        for (int32_t i = 0; i < n; ++i) reset(total[static_cast<size_t>(i)], hd);
        for (int32_t c = 0; c < t.chunks; ++c) {
          chunk_states(t, c, part, scores);
          for (int32_t i = 0; i < n; ++i) {
            const float* qv;
            float* o;
            int32_t visible;
            query(t, i, &qv, &o, &visible);
            if (c * chunk_keys < visible) fold(total[static_cast<size_t>(i)], part[static_cast<size_t>(i)], hd);
          }
        }
        for (int32_t i = 0; i < n; ++i) {
          const float* qv;
          float* o;
          int32_t visible;
          query(t, i, &qv, &o, &visible);
          write_output(total[static_cast<size_t>(i)], o, hd);
        }
      }
    });
    return;
  }

  // Few tiles (a long decode, a small batch): one task per (tile, chunk),
  // partials kept, then folded per tile in chunk order.
  std::vector<int64_t> first_task(tiles.size() + 1, 0);
  for (size_t ti = 0; ti < tiles.size(); ++ti) first_task[ti + 1] = first_task[ti] + tiles[ti].chunks;
  const int64_t n_tasks = first_task.back();
  const int64_t slot = static_cast<int64_t>(per_tile) * (hd + 3);  // per task: per query acc, m, l, bad
  std::vector<float> partials(static_cast<size_t>(n_tasks * slot));
  pool.parallel_for(n_tasks, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(key_block);
    std::vector<State> states(static_cast<size_t>(per_tile));
    for (int64_t task = begin; task < end; ++task) {
      const auto ti = static_cast<size_t>(std::upper_bound(first_task.begin(), first_task.end(), task) -
                                          first_task.begin() - 1);
      const auto c = static_cast<int32_t>(task - first_task[ti]);
      float* base = partials.data() + task * slot;
      for (int32_t i = 0; i < per_tile; ++i) states[static_cast<size_t>(i)].acc = base + static_cast<int64_t>(i) * hd;
      chunk_states(tiles[ti], c, states, scores.data());
      float* tail = base + static_cast<int64_t>(per_tile) * hd;
      for (int32_t i = 0; i < per_tile; ++i) {
        tail[3 * i] = states[static_cast<size_t>(i)].m;
        tail[3 * i + 1] = states[static_cast<size_t>(i)].l;
        tail[3 * i + 2] = states[static_cast<size_t>(i)].bad ? 1.0f : 0.0f;
      }
    }
  });
  pool.parallel_for(static_cast<int64_t>(tiles.size()), [&](int64_t begin, int64_t end) {
    std::vector<float> acc(static_cast<size_t>(hd));
    for (int64_t ti = begin; ti < end; ++ti) {
      const Tile& t = tiles[static_cast<size_t>(ti)];
      for (int32_t i = 0; i < t.count * group; ++i) {
        const float* qv;
        float* o;
        int32_t visible;
        query(t, i, &qv, &o, &visible);
        State total;
        total.acc = acc.data();
        reset(total, hd);
        for (int32_t c = 0; c * chunk_keys < visible; ++c) {
          float* base = partials.data() + (first_task[static_cast<size_t>(ti)] + c) * slot;
          const float* tail = base + static_cast<int64_t>(per_tile) * hd;
          State part;
          part.acc = base + static_cast<int64_t>(i) * hd;
          part.m = tail[3 * i];
          part.l = tail[3 * i + 1];
          part.bad = tail[3 * i + 2] != 0.0f;
          fold(total, part, hd);
        }
        write_output(total, o, hd);
      }
    }
  });
}

}  // namespace actorlm::cpu
