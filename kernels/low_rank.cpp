#include "kernels/low_rank.hpp"

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <vector>

#include "kernels/half.hpp"

namespace actorlm {
namespace {

#if defined(__AVX512F__)
// Every lane (the masked conversion: GCC 12's unmasked one trips
// -Wmaybe-uninitialized).
constexpr __mmask16 kAll = 0xFFFF;
#endif

// Sixteen running sums, each over every sixteenth element, then added in a
// fixed order; the half-precision values widened exactly. The vector paths
// and the plain one keep the same sixteen sums.
float dot_f16(const float* x, const uint16_t* a, int64_t n) {
  int64_t i = 0;
  float acc[16];
#if defined(__AVX512F__)
  __m512 v = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    v = _mm512_fmadd_ps(_mm512_loadu_ps(x + i),
                        _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i))), v);
  }
  _mm512_storeu_ps(acc, v);
#elif defined(__F16C__) && defined(__FMA__)
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    lo = _mm256_fmadd_ps(_mm256_loadu_ps(x + i),
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i))), lo);
    hi = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8),
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i + 8))), hi);
  }
  _mm256_storeu_ps(acc, lo);
  _mm256_storeu_ps(acc + 8, hi);
#else
  for (float& v : acc) v = 0.0f;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += x[i + j] * f16_to_f32(a[i + j]);
  }
#endif
  for (int width = 8; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  }
  float sum = acc[0];
  for (; i < n; ++i) sum += x[i] * f16_to_f32(a[i]);
  return sum;
}

// y[0, n) += t · b[0, n).
void axpy_f16(float t, const uint16_t* b, float* y, int64_t n) {
  int64_t o = 0;
#if defined(__AVX512F__)
  const __m512 tv = _mm512_set1_ps(t);
  for (; o + 16 <= n; o += 16) {
    const __m512 bv = _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + o)));
    _mm512_storeu_ps(y + o, _mm512_fmadd_ps(tv, bv, _mm512_loadu_ps(y + o)));
  }
#elif defined(__F16C__) && defined(__FMA__)
  const __m256 tv = _mm256_set1_ps(t);
  for (; o + 8 <= n; o += 8) {
    const __m256 bv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + o)));
    _mm256_storeu_ps(y + o, _mm256_fmadd_ps(tv, bv, _mm256_loadu_ps(y + o)));
  }
#endif
  for (; o < n; ++o) y[o] += t * f16_to_f32(b[o]);
}

void one_row(const float* xr, int64_t in, float* yr, int64_t out_cols, const LowRankSlice& s, float* t) {
  for (int32_t k = 0; k < s.rank; ++k) t[k] = s.scale * dot_f16(xr, s.a + k * in, in);
  for (int32_t k = 0; k < s.rank; ++k) axpy_f16(t[k], s.bt + k * out_cols, yr, out_cols);
}

}  // namespace

int64_t low_rank_rows(std::span<const LowRankSlice> slices) {
  int64_t n = 0;
  for (const LowRankSlice& s : slices) n += s.rows;
  return n;
}

void low_rank_add_rows(const float* x, int64_t ldx, int64_t in, float* out, int64_t ldo, int64_t out_cols,
                       std::span<const LowRankSlice> slices, int64_t begin, int64_t end) {
  constexpr int32_t kStackRank = 256;
  float stack[kStackRank];
  std::vector<float> heap;
  int64_t first = 0;  // the global index of slice s's first row
  for (const LowRankSlice& s : slices) {
    const int64_t from = std::max(begin, first), to = std::min(end, first + s.rows);
    float* t = stack;
    if (s.rank > kStackRank) {
      heap.resize(static_cast<size_t>(s.rank));
      t = heap.data();
    }
    for (int64_t g = from; g < to; ++g) {
      const int64_t r = s.row_begin + (g - first);
      one_row(x + r * ldx, in, out + r * ldo, out_cols, s, t);
    }
    first += s.rows;
    if (first >= end) break;
  }
}

void Backend::low_rank_add(const float* x, int64_t ldx, int64_t in, float* out, int64_t ldo, int64_t out_cols,
                           std::span<const LowRankSlice> slices) {
  low_rank_add_rows(x, ldx, in, out, ldo, out_cols, slices, 0, low_rank_rows(slices));
}

}  // namespace actorlm
