// attention_block.hpp for AVX-512 (compiled with -mavx512f -mfma -mf16c; the
// caller checks the CPU first). 16 keys per vector for scores (K transposed
// once per block, then every query of a tile broadcasts its dimensions onto
// it), 64 dimensions of 4 queries in registers for the value sums.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/attention_block.hpp"

namespace actorlm::cpu::attention_block {
namespace {

// The masked forms with every lane selected: GCC 12's unmasked ones pass an
// "undefined" vector that -Wuninitialized reports.
constexpr __mmask16 all = 0xFFFF;
inline __m512 unpacklo(__m512 a, __m512 b) { return _mm512_maskz_unpacklo_ps(all, a, b); }
inline __m512 unpackhi(__m512 a, __m512 b) { return _mm512_maskz_unpackhi_ps(all, a, b); }
template <int imm>
inline __m512 shuffle(__m512 a, __m512 b) {
  return _mm512_maskz_shuffle_ps(all, a, b, imm);
}
template <int imm>
inline __m512 shuffle_lanes(__m512 a, __m512 b) {
  return _mm512_maskz_shuffle_f32x4(all, a, b, imm);
}

// r[i] (row i, 16 floats) becomes column i: the usual three rounds of
// pairwise interleaving (within 128-bit lanes, then of 128-bit lanes).
void transpose16(__m512* r) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = unpacklo(r[i], r[i + 1]);
    t[i + 1] = unpackhi(r[i], r[i + 1]);
  }
  // u[4g + c] holds, in 128-bit lane L, column 4L + c of rows 4g..4g+3.
  for (int g = 0; g < 16; g += 4) {
    u[g] = shuffle<0x44>(t[g], t[g + 2]);
    u[g + 1] = shuffle<0xEE>(t[g], t[g + 2]);
    u[g + 2] = shuffle<0x44>(t[g + 1], t[g + 3]);
    u[g + 3] = shuffle<0xEE>(t[g + 1], t[g + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    // Lanes 0 and 2 (0x88) or 1 and 3 (0xDD) of each source.
    const __m512 even_lo = shuffle_lanes<0x88>(u[c], u[4 + c]);
    const __m512 odd_lo = shuffle_lanes<0xDD>(u[c], u[4 + c]);
    const __m512 even_hi = shuffle_lanes<0x88>(u[8 + c], u[12 + c]);
    const __m512 odd_hi = shuffle_lanes<0xDD>(u[8 + c], u[12 + c]);
    r[c] = shuffle_lanes<0x88>(even_lo, even_hi);
    r[8 + c] = shuffle_lanes<0xDD>(even_lo, even_hi);
    r[4 + c] = shuffle_lanes<0x88>(odd_lo, odd_hi);
    r[12 + c] = shuffle_lanes<0xDD>(odd_lo, odd_hi);
  }
}

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  return _mm512_maskz_cvtph_ps(all, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline float widen1(float v) { return v; }
inline float widen1(uint16_t v) { return _cvtsh_ss(v); }

template <class T>
void transpose_any(const T* const* k, int32_t n, int32_t hd, float* kt) {
  const int32_t padded = (n + 15) & ~15, hd16 = hd & ~15;
  for (int32_t j0 = 0; j0 < padded; j0 += 16) {
    for (int32_t d0 = 0; d0 < hd16; d0 += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = j0 + i < n ? load16(k[j0 + i] + d0) : _mm512_setzero_ps();
      transpose16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_ps(kt + static_cast<int64_t>(d0 + i) * keys + j0, r[i]);
    }
    for (int32_t d = hd16; d < hd; ++d) {
      for (int i = 0; i < 16; ++i) kt[static_cast<int64_t>(d) * keys + j0 + i] = j0 + i < n ? widen1(k[j0 + i][d]) : 0.0f;
    }
  }
}

// Scores of MQ queries against NK vectors of 16 keys from key j0.
template <int MQ, int NK>
void score_tile(const float* const* q, const float* kt, int32_t j0, int32_t hd, float* scores) {
  const int32_t hd16 = hd & ~15;
  __m512 s[MQ][NK];
  for (int m = 0; m < MQ; ++m) {
    for (int c = 0; c < NK; ++c) s[m][c] = _mm512_setzero_ps();
  }
  for (int32_t p = 0; p < 16; ++p) {
    __m512 t[MQ][NK];
    for (int m = 0; m < MQ; ++m) {
      for (int c = 0; c < NK; ++c) t[m][c] = _mm512_setzero_ps();
    }
    auto step = [&](int32_t d) {
      __m512 kv[NK];
      for (int c = 0; c < NK; ++c) kv[c] = _mm512_loadu_ps(kt + static_cast<int64_t>(d) * keys + j0 + 16 * c);
      for (int m = 0; m < MQ; ++m) {
        const __m512 qd = _mm512_set1_ps(q[m][d]);
        for (int c = 0; c < NK; ++c) t[m][c] = _mm512_fmadd_ps(qd, kv[c], t[m][c]);
      }
    };
    for (int32_t d = p; d < hd16; d += 16) step(d);
    if (p == 0) {
      for (int32_t d = hd16; d < hd; ++d) step(d);
    }
    for (int m = 0; m < MQ; ++m) {
      for (int c = 0; c < NK; ++c) s[m][c] = _mm512_add_ps(s[m][c], t[m][c]);
    }
  }
  for (int m = 0; m < MQ; ++m) {
    for (int c = 0; c < NK; ++c) _mm512_storeu_ps(scores + static_cast<int64_t>(m) * keys + j0 + 16 * c, s[m][c]);
  }
}

template <int MQ>
void score_rows(const float* const* q, const float* kt, int32_t n, int32_t hd, float* scores) {
  int32_t j0 = 0;
  for (; j0 + 32 <= n; j0 += 32) score_tile<MQ, 2>(q, kt, j0, hd, scores);
  for (; j0 < n; j0 += 16) score_tile<MQ, 1>(q, kt, j0, hd, scores);
}

// Up to 64 dimensions [d0, d0 + 16 * U) of MQ queries.
template <int MQ, int U>
void accumulate_tile(const float* const* v, int32_t j0, int32_t j1, int32_t d0, const float* const* p,
                     int32_t p_offset, const float* alpha, float* const* acc) {
  __m512 c[MQ][U];
  for (int m = 0; m < MQ; ++m) {
    const __m512 a = _mm512_set1_ps(alpha[m]);
    for (int u = 0; u < U; ++u) c[m][u] = _mm512_mul_ps(_mm512_loadu_ps(acc[m] + d0 + 16 * u), a);
  }
  for (int32_t j = j0; j < j1; ++j) {
    __m512 vv[U];
    for (int u = 0; u < U; ++u) vv[u] = _mm512_loadu_ps(v[j] + d0 + 16 * u);
    for (int m = 0; m < MQ; ++m) {
      const __m512 pj = _mm512_set1_ps(p[m][j - p_offset]);
      for (int u = 0; u < U; ++u) c[m][u] = _mm512_fmadd_ps(pj, vv[u], c[m][u]);
    }
  }
  for (int m = 0; m < MQ; ++m) {
    for (int u = 0; u < U; ++u) _mm512_storeu_ps(acc[m] + d0 + 16 * u, c[m][u]);
  }
}

template <int MQ>
void accumulate_rows(const float* const* v, int32_t j0, int32_t j1, int32_t hd, const float* const* p,
                     int32_t p_offset, const float* alpha, float* const* acc) {
  int32_t d0 = 0;
  for (; d0 + 64 <= hd; d0 += 64) accumulate_tile<MQ, 4>(v, j0, j1, d0, p, p_offset, alpha, acc);
  for (; d0 + 16 <= hd; d0 += 16) accumulate_tile<MQ, 1>(v, j0, j1, d0, p, p_offset, alpha, acc);
  for (; d0 < hd; ++d0) {
    for (int m = 0; m < MQ; ++m) {
      float e = acc[m][d0] * alpha[m];
      for (int32_t j = j0; j < j1; ++j) e = __builtin_fmaf(p[m][j - p_offset], v[j][d0], e);
      acc[m][d0] = e;
    }
  }
}

}  // namespace

void transpose_keys(const float* const* k, int32_t n, int32_t hd, float* kt) { transpose_any(k, n, hd, kt); }
void transpose_keys(const uint16_t* const* k, int32_t n, int32_t hd, float* kt) { transpose_any(k, n, hd, kt); }

void widen_rows(const uint16_t* const* v, int32_t n, int32_t hd, float* out) {
  const int32_t hd16 = hd & ~15;
  for (int32_t j = 0; j < n; ++j) {
    float* o = out + static_cast<int64_t>(j) * hd;
    for (int32_t d = 0; d < hd16; d += 16) _mm512_storeu_ps(o + d, load16(v[j] + d));
    for (int32_t d = hd16; d < hd; ++d) o[d] = _cvtsh_ss(v[j][d]);
  }
}

void scores(const float* const* q, int32_t nq, const float* kt, int32_t n, int32_t hd, float* out) {
  int32_t i = 0;
  for (; i + 4 <= nq; i += 4) score_rows<4>(q + i, kt, n, hd, out + static_cast<int64_t>(i) * keys);
  switch (nq - i) {
    case 3: score_rows<3>(q + i, kt, n, hd, out + static_cast<int64_t>(i) * keys); break;
    case 2: score_rows<2>(q + i, kt, n, hd, out + static_cast<int64_t>(i) * keys); break;
    case 1: score_rows<1>(q + i, kt, n, hd, out + static_cast<int64_t>(i) * keys); break;
    default: break;
  }
}

void accumulate(const float* const* v, int32_t j0, int32_t j1, int32_t hd, const float* const* p, int32_t p_offset,
                const float* alpha, float* const* acc, int32_t nq) {
  switch (nq) {
    case 4: accumulate_rows<4>(v, j0, j1, hd, p, p_offset, alpha, acc); break;
    case 3: accumulate_rows<3>(v, j0, j1, hd, p, p_offset, alpha, acc); break;
    case 2: accumulate_rows<2>(v, j0, j1, hd, p, p_offset, alpha, acc); break;
    case 1: accumulate_rows<1>(v, j0, j1, hd, p, p_offset, alpha, acc); break;
    default: break;
  }
}

}  // namespace actorlm::cpu::attention_block

#endif  // __x86_64__
