#pragma once
// attention_block.hpp's kernels written once over a vector policy V (the
// width and the handful of instructions that differ), included only by the
// ISA translation units (attention_block_avx2.cpp, attention_block_avx512.cpp),
// each compiled for its ISA. Everything here has internal linkage, so the
// copies never meet at link time.
//
// V provides: F (the float vector), width (floats per vector), zero(),
// set1(f), load(const float*), load(const uint16_t*) (f16 widened),
// store(float*, F), fmadd(a, b, c) (a * b + c, fused), add(a, b), mul(a, b),
// transpose(F r[width]) (row i becomes column i), and the register blocking:
//   score_queries x score_vectors   queries x key vectors of one score tile
//   value_vectors                   vectors of dimensions per value tile
// chosen so a tile's accumulators, its running chain sums and the loaded
// rows fit the ISA's vector registers (16 for AVX2, 32 for AVX-512).

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/attention_block.hpp"

namespace actorlm::cpu::attention_block {
namespace {

inline float widen1(float v) { return v; }
inline float widen1(uint16_t v) { return _cvtsh_ss(v); }

template <class V, class T>
void transpose_any(const T* const* k, int32_t n, int32_t hd, float* kt) {
  constexpr int32_t W = V::width;
  const int32_t padded = (n + 15) & ~15, hdw = hd & ~(W - 1);
  for (int32_t j0 = 0; j0 < padded; j0 += W) {
    for (int32_t d0 = 0; d0 < hdw; d0 += W) {
      typename V::F r[W];
      for (int i = 0; i < W; ++i) r[i] = j0 + i < n ? V::load(k[j0 + i] + d0) : V::zero();
      V::transpose(r);
      for (int i = 0; i < W; ++i) V::store(kt + static_cast<int64_t>(d0 + i) * keys + j0, r[i]);
    }
    for (int32_t d = hdw; d < hd; ++d) {
      for (int i = 0; i < W; ++i) kt[static_cast<int64_t>(d) * keys + j0 + i] = j0 + i < n ? widen1(k[j0 + i][d]) : 0.0f;
    }
  }
}

// Scores of MQ queries against NK vectors of keys from key j0. Chain p
// (dimensions p, p + 16, ...) is summed apart and added onto the score in
// order of p, as the per-query kernel does.
template <class V, int MQ, int NK>
void score_tile(const float* const* q, const float* kt, int32_t j0, int32_t hd, float* scores) {
  using F = typename V::F;
  const int32_t hd16 = hd & ~15;
  F s[MQ][NK];
  for (int m = 0; m < MQ; ++m) {
    for (int c = 0; c < NK; ++c) s[m][c] = V::zero();
  }
  for (int32_t p = 0; p < 16; ++p) {
    F t[MQ][NK];
    for (int m = 0; m < MQ; ++m) {
      for (int c = 0; c < NK; ++c) t[m][c] = V::zero();
    }
    auto step = [&](int32_t d) __attribute__((always_inline)) {
      F kv[NK];
      for (int c = 0; c < NK; ++c) kv[c] = V::load(kt + static_cast<int64_t>(d) * keys + j0 + V::width * c);
      for (int m = 0; m < MQ; ++m) {
        const F qd = V::set1(q[m][d]);
        for (int c = 0; c < NK; ++c) t[m][c] = V::fmadd(qd, kv[c], t[m][c]);
      }
    };
    for (int32_t d = p; d < hd16; d += 16) step(d);
    if (p == 0) {
      for (int32_t d = hd16; d < hd; ++d) step(d);
    }
    for (int m = 0; m < MQ; ++m) {
      for (int c = 0; c < NK; ++c) s[m][c] = V::add(s[m][c], t[m][c]);
    }
  }
  for (int m = 0; m < MQ; ++m) {
    for (int c = 0; c < NK; ++c) V::store(scores + static_cast<int64_t>(m) * keys + j0 + V::width * c, s[m][c]);
  }
}

template <class V, int MQ>
void score_rows(const float* const* q, const float* kt, int32_t n, int32_t hd, float* scores) {
  constexpr int32_t NK = V::score_vectors, W = V::width;
  int32_t j0 = 0;
  for (; j0 + NK * W <= n; j0 += NK * W) score_tile<V, MQ, NK>(q, kt, j0, hd, scores);
  for (; j0 < n; j0 += W) score_tile<V, MQ, 1>(q, kt, j0, hd, scores);
}

template <class V>
void scores(const float* const* q, int32_t nq, const float* kt, int32_t n, int32_t hd, float* out) {
  constexpr int MQ = V::score_queries;
  static_assert(MQ >= 1 && MQ <= 4);
  auto rows = [&](int32_t i, auto count) {
    score_rows<V, decltype(count)::value>(q + i, kt, n, hd, out + static_cast<int64_t>(i) * keys);
  };
  int32_t i = 0;
  for (; i + MQ <= nq; i += MQ) rows(i, std::integral_constant<int, MQ>{});
  switch (nq - i) {
    case 3: rows(i, std::integral_constant<int, 3>{}); break;
    case 2: rows(i, std::integral_constant<int, 2>{}); break;
    case 1: rows(i, std::integral_constant<int, 1>{}); break;
    default: break;
  }
}

// Dimensions [d0, d0 + width * U) of MQ queries.
template <class V, int MQ, int U>
void accumulate_tile(const float* const* v, int32_t j0, int32_t j1, int32_t d0, const float* const* p,
                     int32_t p_offset, const float* alpha, float* const* acc) {
  using F = typename V::F;
  F c[MQ][U];
  for (int m = 0; m < MQ; ++m) {
    const F a = V::set1(alpha[m]);
    for (int u = 0; u < U; ++u) c[m][u] = V::mul(V::load(acc[m] + d0 + V::width * u), a);
  }
  for (int32_t j = j0; j < j1; ++j) {
    F vv[U];
    for (int u = 0; u < U; ++u) vv[u] = V::load(v[j] + d0 + V::width * u);
    for (int m = 0; m < MQ; ++m) {
      const F pj = V::set1(p[m][j - p_offset]);
      for (int u = 0; u < U; ++u) c[m][u] = V::fmadd(pj, vv[u], c[m][u]);
    }
  }
  for (int m = 0; m < MQ; ++m) {
    for (int u = 0; u < U; ++u) V::store(acc[m] + d0 + V::width * u, c[m][u]);
  }
}

template <class V, int MQ>
void accumulate_rows(const float* const* v, int32_t j0, int32_t j1, int32_t hd, const float* const* p,
                     int32_t p_offset, const float* alpha, float* const* acc) {
  constexpr int32_t U = V::value_vectors, W = V::width;
  int32_t d0 = 0;
  for (; d0 + U * W <= hd; d0 += U * W) accumulate_tile<V, MQ, U>(v, j0, j1, d0, p, p_offset, alpha, acc);
  for (; d0 + W <= hd; d0 += W) accumulate_tile<V, MQ, 1>(v, j0, j1, d0, p, p_offset, alpha, acc);
  for (; d0 < hd; ++d0) {
    for (int m = 0; m < MQ; ++m) {
      float e = acc[m][d0] * alpha[m];
      for (int32_t j = j0; j < j1; ++j) e = __builtin_fmaf(p[m][j - p_offset], v[j][d0], e);
      acc[m][d0] = e;
    }
  }
}

template <class V>
void accumulate(const float* const* v, int32_t j0, int32_t j1, int32_t hd, const float* const* p, int32_t p_offset,
                const float* alpha, float* const* acc, int32_t nq) {
  switch (nq) {
    case 4: accumulate_rows<V, 4>(v, j0, j1, hd, p, p_offset, alpha, acc); break;
    case 3: accumulate_rows<V, 3>(v, j0, j1, hd, p, p_offset, alpha, acc); break;
    case 2: accumulate_rows<V, 2>(v, j0, j1, hd, p, p_offset, alpha, acc); break;
    case 1: accumulate_rows<V, 1>(v, j0, j1, hd, p, p_offset, alpha, acc); break;
    default: break;
  }
}

template <class V>
void widen_rows(const uint16_t* const* v, int32_t n, int32_t hd, float* out) {
  constexpr int32_t W = V::width;
  const int32_t hdw = hd & ~(W - 1);
  for (int32_t j = 0; j < n; ++j) {
    float* o = out + static_cast<int64_t>(j) * hd;
    for (int32_t d = 0; d < hdw; d += W) V::store(o + d, V::load(v[j] + d));
    for (int32_t d = hdw; d < hd; ++d) o[d] = _cvtsh_ss(v[j][d]);
  }
}

template <class V>
constexpr Kernels kernels_for() {
  return Kernels{
      [](const float* const* k, int32_t n, int32_t hd, float* kt) { transpose_any<V>(k, n, hd, kt); },
      [](const uint16_t* const* k, int32_t n, int32_t hd, float* kt) { transpose_any<V>(k, n, hd, kt); },
      widen_rows<V>,
      scores<V>,
      accumulate<V>,
  };
}

}  // namespace
}  // namespace actorlm::cpu::attention_block
