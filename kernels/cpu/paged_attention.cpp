#include "kernels/cpu/paged_attention.hpp"

#include "kernels/cpu/activation_math.hpp"
#include "kernels/cpu/attention_block.hpp"
#include "kernels/cpu/exp_nonpositive.hpp"
#include "kernels/half.hpp"

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace actorlm::cpu {
namespace {

constexpr int32_t key_block = 64;     // keys per online-softmax step
constexpr int32_t chunk_keys = 512;   // keys per partial (a multiple of key_block)
constexpr int32_t tile_positions = 8; // query positions per task

// Eight floats at any alignment (GCC vector extension: the same code builds
// for any x86 level, or none).
using f8 = float __attribute__((vector_size(32), aligned(4)));

inline f8 load8(const float* p) {
  f8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Eight halves widened (the f16 KV cache).
inline f8 load8(const uint16_t* p) {
#if defined(__F16C__)
  return f8(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#else
  f8 v;
  for (int i = 0; i < 8; ++i) v[i] = f16_to_f32(p[i]);
  return v;
#endif
}

inline float widen(float v) { return v; }
inline float widen(uint16_t v) { return f16_to_f32(v); }

inline void store8(float* p, f8 v) { std::memcpy(p, &v, sizeof v); }

// a * b + c, fused in every build: the blocked kernels (attention_block.hpp,
// always FMA) give these loops' bits, whatever flags this unit has. Without
// FMA instructions in the unit that is libm's fmaf per lane (correct, slow:
// only the portable path, for CPUs without AVX2, runs it).
inline f8 madd(f8 a, f8 b, f8 c) {
#if defined(__FMA__)
  return f8(_mm256_fmadd_ps(__m256(a), __m256(b), __m256(c)));
#else
  f8 out;
  for (int i = 0; i < 8; ++i) out[i] = std::fma(a[i], b[i], c[i]);
  return out;
#endif
}

inline float madd1(float a, float b, float c) { return std::fma(a, b, c); }

// q · k_j for up to 4 keys at once (independent chains for the FPU), in
// one fixed order: lane p of 16 sums the dimensions d = p (mod 16) in order
// (dimensions past the last 16 go to lane 0), then the lanes are added one
// after another from lane 0. A score is then the same number whatever keys
// it is computed with. (That is also the order the previous, per-key loop
// compiled to; a tree over 8 lanes instead moved teacher-forced agreement
// with llama.cpp from 98.08% to 97.81%, near ties flipping on rounding.)
template <int M, class T>
void dots(const float* q, const T* const* k, int32_t hd, float* out) {
  f8 lo[M], hi[M];
  for (int m = 0; m < M; ++m) lo[m] = hi[m] = f8{};
  int32_t d = 0;
  for (; d + 16 <= hd; d += 16) {
    const f8 q0 = load8(q + d), q1 = load8(q + d + 8);
    for (int m = 0; m < M; ++m) {
      lo[m] = madd(q0, load8(k[m] + d), lo[m]);
      hi[m] = madd(q1, load8(k[m] + d + 8), hi[m]);
    }
  }
  for (int m = 0; m < M; ++m) {
    for (int32_t e = d; e < hd; ++e) lo[m][0] = madd1(q[e], widen(k[m][e]), lo[m][0]);
    float s = 0.0f;
    for (int p = 0; p < 8; ++p) s += lo[m][p];
    for (int p = 0; p < 8; ++p) s += hi[m][p];
    out[m] = s;
  }
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
  if (other.l == 0.0f) return;  // no visible key (before a sliding window)
  const float m = std::max(s.m, other.m);
  const float a = exp_nonpositive(s.m - m), b = exp_nonpositive(other.m - m);
  s.l = s.l * a + other.l * b;
#pragma omp simd
  for (int32_t d = 0; d < hd; ++d) s.acc[d] = s.acc[d] * a + other.acc[d] * b;
  s.m = m;
}

// dots<8> with the 16-lane sums of 8 keys done as vector adds across keys
// (their lanes transposed first) instead of one scalar add at a time: the
// same additions in the same order, so the same scores.
template <class T>
void dots8(const float* q, const T* const* k, int32_t hd, float* out) {
#if defined(__AVX__)
  f8 lo[8], hi[8];
  for (int m = 0; m < 8; ++m) lo[m] = hi[m] = f8{};
  int32_t d = 0;
  for (; d + 16 <= hd; d += 16) {
    const f8 q0 = load8(q + d), q1 = load8(q + d + 8);
    for (int m = 0; m < 8; ++m) {
      lo[m] = madd(q0, load8(k[m] + d), lo[m]);
      hi[m] = madd(q1, load8(k[m] + d + 8), hi[m]);
    }
  }
  for (int m = 0; m < 8; ++m) {
    for (int32_t e = d; e < hd; ++e) lo[m][0] = madd1(q[e], widen(k[m][e]), lo[m][0]);
  }
  // 8x8 transpose: t[p] lane m = v[m] lane p.
  auto transpose = [](const f8* v, f8* t) {
    __m256 a[8], b[8];
    for (int m = 0; m < 8; m += 2) {
      a[m] = _mm256_unpacklo_ps(__m256(v[m]), __m256(v[m + 1]));
      a[m + 1] = _mm256_unpackhi_ps(__m256(v[m]), __m256(v[m + 1]));
    }
    for (int m = 0; m < 8; m += 4) {
      b[m] = _mm256_shuffle_ps(a[m], a[m + 2], 0x44);
      b[m + 1] = _mm256_shuffle_ps(a[m], a[m + 2], 0xEE);
      b[m + 2] = _mm256_shuffle_ps(a[m + 1], a[m + 3], 0x44);
      b[m + 3] = _mm256_shuffle_ps(a[m + 1], a[m + 3], 0xEE);
    }
    for (int p = 0; p < 4; ++p) {
      t[p] = f8(_mm256_permute2f128_ps(b[p], b[p + 4], 0x20));
      t[p + 4] = f8(_mm256_permute2f128_ps(b[p], b[p + 4], 0x31));
    }
  };
  f8 t[8];
  f8 sum = f8{};
  transpose(lo, t);
  for (int p = 0; p < 8; ++p) sum += t[p];
  transpose(hi, t);
  for (int p = 0; p < 8; ++p) sum += t[p];
  store8(out, sum);
#else
  dots<4>(q, k, hd, out);
  dots<4>(q, k + 4, hd, out + 4);
#endif
}

// One online-softmax step of one query over n keys (n <= key_block), in two
// halves so that a tile runs the first for all its queries over a block's K
// rows, then the second over its V rows (each 16 KB for 64 keys of 64
// floats, so either fits in L1; both at once did not). softmax_step takes
// the n scores q · k_j, leaves p_j = exp(score_j - max) in their place and
// the factor for the old sums in *alpha; false when a score is not finite
// (the state is then marked bad).
bool softmax_step(float* scores, int32_t n, float scale, float softcap, State& s, float* alpha_out,
                  const activation_math::Kernels& math) {
  if (softcap > 0.0f) {
    for (int32_t j = 0; j < n; ++j) scores[j] = softcap * std::tanh(scores[j] * scale / softcap);
    scale = 1.0f;  // scale_max's multiply is then exact
  }
  const float block_max = math.scale_max(scores, n, scale);
  if (std::isnan(block_max)) {
    s.bad = true;
    return false;
  }
  const float m = std::max(s.m, block_max);
  const float alpha = exp_nonpositive(s.m - m);
  const float sum = math.exp_sum(scores, n, m);
  s.l = s.l * alpha + sum;
  s.m = m;
  *alpha_out = alpha;
  return true;
}

template <class T>
bool score_block(const float* qv, const T* const* k, int32_t n, int32_t hd, float scale, float softcap, State& s,
                 float* scores, float* alpha_out, const activation_math::Kernels& math) {
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) dots8(qv, k + j, hd, scores + j);
  for (; j + 4 <= n; j += 4) dots<4>(qv, k + j, hd, scores + j);
  for (; j < n; ++j) dots<1>(qv, k + j, hd, scores + j);
  return softmax_step(scores, n, scale, softcap, s, alpha_out, math);
}

template <class T>
void accumulate_block(const T* const* v, int32_t n, int32_t hd, const float* scores, float alpha, State& s) {
  int32_t j = 0;
  // acc = acc * alpha + sum_j p_j v_j, 64 dimensions at a time in registers
  // (8 independent FMA chains: with 4, their latency bounded the loop); each
  // element sees the same operations in the same order as one at a time.
  const f8 a8 = f8{} + alpha;
  int32_t d = 0;
  for (; d + 64 <= hd; d += 64) {
    f8 c[8];
    for (int u = 0; u < 8; ++u) c[u] = load8(s.acc + d + 8 * u) * a8;
    for (j = 0; j < n; ++j) {
      const f8 p = f8{} + scores[j];
      const T* vr = v[j] + d;
      for (int u = 0; u < 8; ++u) c[u] = madd(p, load8(vr + 8 * u), c[u]);
    }
    for (int u = 0; u < 8; ++u) store8(s.acc + d + 8 * u, c[u]);
  }
  for (; d + 32 <= hd; d += 32) {
    f8 c0 = load8(s.acc + d) * a8, c1 = load8(s.acc + d + 8) * a8;
    f8 c2 = load8(s.acc + d + 16) * a8, c3 = load8(s.acc + d + 24) * a8;
    for (j = 0; j < n; ++j) {
      const f8 p = f8{} + scores[j];
      const T* vr = v[j] + d;
      c0 = madd(p, load8(vr), c0);
      c1 = madd(p, load8(vr + 8), c1);
      c2 = madd(p, load8(vr + 16), c2);
      c3 = madd(p, load8(vr + 24), c3);
    }
    store8(s.acc + d, c0);
    store8(s.acc + d + 8, c1);
    store8(s.acc + d + 16, c2);
    store8(s.acc + d + 24, c3);
  }
  for (; d + 8 <= hd; d += 8) {
    f8 c = load8(s.acc + d) * a8;
    for (j = 0; j < n; ++j) c = madd(f8{} + scores[j], load8(v[j] + d), c);
    store8(s.acc + d, c);
  }
  for (; d < hd; ++d) {
    float e = s.acc[d] * alpha;
    for (j = 0; j < n; ++j) e = madd1(scores[j], widen(v[j][d]), e);
    s.acc[d] = e;
  }
}

void write_output(const State& s, float* o, int32_t hd) {
  const float inv = 1.0f / s.l;
  for (int32_t d = 0; d < hd; ++d) o[d] = s.bad ? NAN : s.acc[d] * inv;
}

// Per-thread scratch of a tile's chunk.
struct Workspace {
  std::vector<float> p;      // per query: its block's scores, then their exp weights (key_block each)
  std::vector<float> alpha;  // per query: the factor for its old sums (NaN: nothing to add)
  std::vector<const float*> q;
  std::vector<int32_t> lo, hi;  // per query: its visible keys in the block
  // The blocked path: the block's K transposed, every query's scores
  // (key_block each), the block's V widened from f16.
  std::vector<float> kt, scores, v;
};

// Up to tile_positions query positions of one request and the query heads
// of one KV head.
struct Tile {
  int32_t req, kvh, first, count;  // queries first..first+count-1 of the request
  int32_t chunks;                  // chunks its last query sees
};

// The whole of paged_attention for K/V rows of type T (float or f16).
template <class T>
void attend(const float* q, const KvLayerView& cache, const T* k_all, const T* v_all, const AttentionPlan& plan,
            const LayerAttention& layer, float* out, ThreadPool& pool, const attention_block::Kernels* blocked,
            const activation_math::Kernels& math) {
  const int32_t window = layer.sliding_window;
  // The first key position a query that sees `visible` positions attends to.
  auto first_key = [window](int32_t visible) { return window > 0 ? std::max(0, visible - window) : 0; };
  const int32_t hd = plan.head_dim;
  const int32_t group = plan.n_heads / plan.n_kv_heads;
  const int64_t q_row = static_cast<int64_t>(plan.n_heads) * hd;
  const int64_t kv_row = static_cast<int64_t>(plan.n_kv_heads) * hd;  // floats (or halves) per pool row
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
  auto workspace = [&] {
    Workspace ws;
    ws.p.resize(static_cast<size_t>(per_tile * key_block));
    ws.alpha.resize(static_cast<size_t>(per_tile));
    ws.q.resize(static_cast<size_t>(per_tile));
    ws.lo.resize(static_cast<size_t>(per_tile));
    ws.hi.resize(static_cast<size_t>(per_tile));
    if (blocked) {
      ws.kt.resize(static_cast<size_t>(hd * key_block));
      ws.scores.resize(static_cast<size_t>(per_tile * key_block));
      if (std::is_same_v<T, uint16_t>) ws.v.resize(static_cast<size_t>(key_block * hd));
    }
    return ws;
  };
  auto rows_of = [&](const Tile& t) {
    return plan.kv_indices.data() + plan.kv_indptr[static_cast<size_t>(t.req)];
  };
  // The partial of one chunk for every query of a tile into states[i].
  auto chunk_states = [&](const Tile& t, int32_t c, std::vector<State>& states, Workspace& ws) {
    const int32_t n = t.count * group;
    for (int32_t i = 0; i < n; ++i) reset(states[static_cast<size_t>(i)], hd);
    const int32_t k0 = c * chunk_keys;
    // Key blocks outer, queries inner: a block's K/V rows stay in cache for
    // every query of the tile; each query still sees its blocks in order.
    const T* kr[key_block];
    const T* vr[key_block];
    const int32_t* rows = rows_of(t);
    const int32_t last_visible = plan.prefix_len[static_cast<size_t>(t.req)] + t.first + t.count;
    // Blocks before the tile's first query's window hold nothing for it or
    // for the later queries.
    const int32_t tile_first = first_key(plan.prefix_len[static_cast<size_t>(t.req)] + t.first + 1);
    const T* kbase = k_all + static_cast<int64_t>(t.kvh) * hd;
    const T* vbase = v_all + static_cast<int64_t>(t.kvh) * hd;
    float* alpha = ws.alpha.data();
    auto p_row = [&](int32_t i) { return ws.p.data() + static_cast<int64_t>(i) * key_block; };
    for (int32_t b0 = std::max(k0, tile_first / key_block * key_block); b0 < std::min(k0 + chunk_keys, last_visible);
         b0 += key_block) {
      const int32_t n_block = std::min(key_block, last_visible - b0);
      for (int32_t j = 0; j < n_block; ++j) {
        kr[j] = kbase + rows[b0 + j] * kv_row;
        vr[j] = vbase + rows[b0 + j] * kv_row;
      }
      // Query i's visible keys in this block, [lo, hi) (empty: none).
      int32_t keys_end = 0;
      for (int32_t i = 0; i < n; ++i) {
        float* o;
        int32_t visible;
        query(t, i, &ws.q[static_cast<size_t>(i)], &o, &visible);
        ws.lo[static_cast<size_t>(i)] = std::clamp(first_key(visible) - b0, 0, n_block);
        ws.hi[static_cast<size_t>(i)] = std::clamp(visible - b0, 0, n_block);
        keys_end = std::max(keys_end, ws.hi[static_cast<size_t>(i)]);
      }
      auto lo = [&](int32_t i) { return ws.lo[static_cast<size_t>(i)]; };
      auto hi = [&](int32_t i) { return ws.hi[static_cast<size_t>(i)]; };
      if (blocked == nullptr) {
        // Scores, then values, one query at a time.
        for (int32_t i = 0; i < n; ++i) {
          if (hi(i) <= lo(i) || !score_block(ws.q[static_cast<size_t>(i)], kr + lo(i), hi(i) - lo(i), hd, plan.scale,
                                             layer.softcap, states[static_cast<size_t>(i)], p_row(i), &alpha[i],
                                             math)) {
            alpha[i] = NAN;  // nothing to add
          }
        }
        for (int32_t i = 0; i < n; ++i) {
          if (!std::isnan(alpha[i])) {
            accumulate_block(vr + lo(i), hi(i) - lo(i), hd, p_row(i), alpha[i], states[static_cast<size_t>(i)]);
          }
        }
        continue;
      }
      // Every query's scores against the block's K, transposed once;
      // then the values of up to 4 queries per V row loaded, over the keys
      // they all see, each finishing its own keys alone.
      const attention_block::Kernels& ab = *blocked;
      if constexpr (std::is_same_v<T, float>) {
        ab.transpose_keys(kr, n_block, hd, ws.kt.data());
      } else {
        ab.transpose_keys_f16(kr, n_block, hd, ws.kt.data());
      }
      // The block's V rows as floats: the pool's own, or f16 ones widened once.
      const float* widened[key_block];
      const float* const* vf = widened;
      if constexpr (std::is_same_v<T, float>) {
        vf = vr;
      } else {
        ab.widen_rows(vr, n_block, hd, ws.v.data());
        for (int32_t j = 0; j < n_block; ++j) widened[j] = ws.v.data() + static_cast<int64_t>(j) * hd;
      }
      ab.scores(ws.q.data(), n, ws.kt.data(), keys_end, hd, ws.scores.data());
      for (int32_t i = 0; i < n; ++i) {
        const float* s = ws.scores.data() + static_cast<int64_t>(i) * key_block;
        std::copy(s + lo(i), s + std::max(lo(i), hi(i)), p_row(i));
        if (hi(i) <= lo(i) ||
            !softmax_step(p_row(i), hi(i) - lo(i), plan.scale, layer.softcap, states[static_cast<size_t>(i)],
                          &alpha[i], math)) {
          alpha[i] = NAN;
        }
      }
      for (int32_t i = 0; i < n;) {
        if (std::isnan(alpha[i])) {
          ++i;
          continue;
        }
        int32_t e = i + 1, common_end = hi(i);
        while (e < n && e - i < 4 && !std::isnan(alpha[e]) && lo(e) == lo(i)) common_end = std::min(common_end, hi(e++));
        const float* ps[4];
        float* accs[4];
        for (int32_t m = 0; m < e - i; ++m) {
          ps[m] = p_row(i + m);
          accs[m] = states[static_cast<size_t>(i + m)].acc;
        }
        ab.accumulate(vf, lo(i), common_end, hd, ps, lo(i), alpha + i, accs, e - i);
        const float one = 1.0f;  // the old sums are already scaled
        for (int32_t m = 0; m < e - i; ++m) {
          if (hi(i + m) > common_end) ab.accumulate(vf, common_end, hi(i + m), hd, ps + m, lo(i), &one, accs + m, 1);
        }
        i = e;
      }
    }
  };

  const bool split = static_cast<int64_t>(tiles.size()) < 2 * pool.size();
  if (!split) {
    pool.parallel_for(static_cast<int64_t>(tiles.size()), [&](int64_t begin, int64_t end) {
      Workspace ws = workspace();
      std::vector<float> buf(static_cast<size_t>(2 * per_tile * hd));
      std::vector<State> total(static_cast<size_t>(per_tile)), part(static_cast<size_t>(per_tile));
      for (int32_t i = 0; i < per_tile; ++i) {
        total[static_cast<size_t>(i)].acc = buf.data() + static_cast<int64_t>(i) * hd;
        part[static_cast<size_t>(i)].acc = buf.data() + static_cast<int64_t>(per_tile + i) * hd;
      }
      for (int64_t ti = begin; ti < end; ++ti) {
        const Tile& t = tiles[static_cast<size_t>(ti)];
        const int32_t n = t.count * group;
        for (int32_t i = 0; i < n; ++i) reset(total[static_cast<size_t>(i)], hd);
        for (int32_t c = 0; c < t.chunks; ++c) {
          chunk_states(t, c, part, ws);
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
    Workspace ws = workspace();
    std::vector<State> states(static_cast<size_t>(per_tile));
    for (int64_t task = begin; task < end; ++task) {
      const auto ti = static_cast<size_t>(std::upper_bound(first_task.begin(), first_task.end(), task) -
                                          first_task.begin() - 1);
      const auto c = static_cast<int32_t>(task - first_task[ti]);
      float* base = partials.data() + task * slot;
      for (int32_t i = 0; i < per_tile; ++i) states[static_cast<size_t>(i)].acc = base + static_cast<int64_t>(i) * hd;
      chunk_states(tiles[ti], c, states, ws);
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

}  // namespace

void paged_attention(const float* q, const KvLayerView& cache, const AttentionPlan& plan, const LayerAttention& layer,
                     float* out, ThreadPool& pool, Isa isa) {
  // The register-blocked kernels where the CPU has AVX2 (they exist only on
  // x86-64), the per-query ones otherwise: the same bits either way.
  const attention_block::Kernels* blocked = nullptr;
#if defined(__x86_64__)
  if (isa == Isa::avx512_vnni) blocked = &attention_block::avx512;
  if (isa == Isa::avx2 || isa == Isa::avx_vnni) blocked = &attention_block::avx2;
#else
  static_cast<void>(isa);
#endif
  if (layer.sliding_window < 0 || !(layer.softcap >= 0.0f && std::isfinite(layer.softcap))) {
    throw std::invalid_argument("attention: sliding window " + std::to_string(layer.sliding_window) + ", softcap " +
                                std::to_string(layer.softcap));
  }
  const activation_math::Kernels& math = activation_math::for_isa(isa);
  if (cache.k16 != nullptr) {
    attend<uint16_t>(q, cache, cache.k16, cache.v16, plan, layer, out, pool, blocked, math);
  } else {
    attend<float>(q, cache, cache.k, cache.v, plan, layer, out, pool, blocked, math);
  }
}

}  // namespace actorlm::cpu
