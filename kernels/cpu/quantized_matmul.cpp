#include "kernels/cpu/quantized_matmul.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define ACTORLM_BLOCK_MATMUL_AVX2 1
#endif

namespace actorlm::cpu {
namespace {

// Block layouts (ggml, little endian, no padding):
//   Q4_1: f16 d, f16 m, uint8 qs[16]; value j = d * q_j + m with q_j = qs[j] & 15
//         for j < 16 and qs[j - 16] >> 4 for j >= 16.
//   Q8_0: f16 d, int8 q[32]; value j = d * q_j.
constexpr int64_t q4_1_bytes = 20;
constexpr int64_t q8_0_bytes = 34;
constexpr float q_max = 32767.0f;  // activations: int16, symmetric

// One quantized row of x.
struct XRow {
  const int16_t* q;
  const float* scale;
  const float* sum;
};

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
#ifdef ACTORLM_BLOCK_MATMUL_AVX2
  return _cvtsh_ss(h);
#else
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0    ? std::ldexp(static_cast<float>(m), -24)
            : e == 31 ? (m ? NAN : INFINITY)
                      : std::ldexp(static_cast<float>(m | 1024), e - 25);
  return (h & 0x8000) ? -v : v;
#endif
}

// Integer block sums: |q_w| <= 128 and |q_x| <= 32767, so 32 products stay
// below 2^27 in int32.
float dot_q4_1_scalar(const uint8_t* b, const XRow& x, int64_t n_blocks) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n_blocks; ++i, b += q4_1_bytes) {
    const uint8_t* qs = b + 4;
    const int16_t* xq = x.q + i * block_values;
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) s += (qs[j] & 15) * xq[j] + (qs[j] >> 4) * xq[j + 16];
    acc += half_at(b) * x.scale[i] * static_cast<float>(s) + half_at(b + 2) * x.sum[i];
  }
  return acc;
}

float dot_q8_0_scalar(const uint8_t* b, const XRow& x, int64_t n_blocks) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n_blocks; ++i, b += q8_0_bytes) {
    const auto* q = reinterpret_cast<const int8_t*>(b + 2);
    const int16_t* xq = x.q + i * block_values;
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += q[j] * xq[j];
    acc += half_at(b) * x.scale[i] * static_cast<float>(s);
  }
  return acc;
}

// y[n] = weight row b · x[n] for n < count (1 <= count <= max_group).
using RowDots = void (*)(const uint8_t* b, const XRow* x, int count, int64_t n_blocks, float* y);
constexpr int max_group = 4;

void dots_scalar_q4_1(const uint8_t* b, const XRow* x, int count, int64_t n_blocks, float* y) {
  for (int n = 0; n < count; ++n) y[n] = dot_q4_1_scalar(b, x[n], n_blocks);
}

void dots_scalar_q8_0(const uint8_t* b, const XRow* x, int count, int64_t n_blocks, float* y) {
  for (int n = 0; n < count; ++n) y[n] = dot_q8_0_scalar(b, x[n], n_blocks);
}

#ifdef ACTORLM_BLOCK_MATMUL_AVX2

float horizontal_sum(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_movehdup_ps(a));
  return _mm_cvtss_f32(a);
}

// One weight row against N rows of x: the block is loaded and widened once
// for all N. Each x row has its own accumulators and goes through the same
// operations in the same order for every N, so its result does not depend on
// N (the batch invariance of the header).
//
// Weights are widened to int16, then madd: int16 x int16 products, adjacent
// pairs added into eight int32 lanes. A lane sums 4 products of the block,
// at most 4 * 15 * 32767 < 2^21 (Q4_1) or 4 * 128 * 32767 < 2^24 (Q8_0), so
// its conversion to float is exact.
template <int N>
void dots_q4_1_avx2(const uint8_t* b, const XRow* x, int64_t n_blocks, float* y) {
  const __m128i low4 = _mm_set1_epi8(15);
  __m256 acc[N];
  float min_acc[N];
  for (int n = 0; n < N; ++n) {
    acc[n] = _mm256_setzero_ps();
    min_acc[n] = 0.0f;
  }
  for (int64_t i = 0; i < n_blocks; ++i, b += q4_1_bytes) {
    __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
    __m256i lo = _mm256_cvtepu8_epi16(_mm_and_si128(qs, low4));                       // values 0..15
    __m256i hi = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(qs, 4), low4));  // values 16..31
    const float d = half_at(b), m = half_at(b + 2);
    for (int n = 0; n < N; ++n) {
      const int16_t* xq = x[n].q + i * block_values;
      __m256i s = _mm256_add_epi32(_mm256_madd_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq))),
                                   _mm256_madd_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 16))));
      acc[n] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[n].scale[i]), _mm256_cvtepi32_ps(s), acc[n]);
      min_acc[n] = std::fma(m, x[n].sum[i], min_acc[n]);
    }
  }
  for (int n = 0; n < N; ++n) y[n] = horizontal_sum(acc[n]) + min_acc[n];
}

template <int N>
void dots_q8_0_avx2(const uint8_t* b, const XRow* x, int64_t n_blocks, float* y) {
  __m256 acc[N];
  for (int n = 0; n < N; ++n) acc[n] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n_blocks; ++i, b += q8_0_bytes) {
    __m256i q0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)));
    __m256i q1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18)));
    const float d = half_at(b);
    for (int n = 0; n < N; ++n) {
      const int16_t* xq = x[n].q + i * block_values;
      __m256i s = _mm256_add_epi32(_mm256_madd_epi16(q0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq))),
                                   _mm256_madd_epi16(q1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 16))));
      acc[n] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[n].scale[i]), _mm256_cvtepi32_ps(s), acc[n]);
    }
  }
  for (int n = 0; n < N; ++n) y[n] = horizontal_sum(acc[n]);
}

void dots_avx2_q4_1(const uint8_t* b, const XRow* x, int count, int64_t n_blocks, float* y) {
  switch (count) {
    case 1: return dots_q4_1_avx2<1>(b, x, n_blocks, y);
    case 2: return dots_q4_1_avx2<2>(b, x, n_blocks, y);
    case 3: return dots_q4_1_avx2<3>(b, x, n_blocks, y);
    default: return dots_q4_1_avx2<4>(b, x, n_blocks, y);
  }
}

void dots_avx2_q8_0(const uint8_t* b, const XRow* x, int count, int64_t n_blocks, float* y) {
  switch (count) {
    case 1: return dots_q8_0_avx2<1>(b, x, n_blocks, y);
    case 2: return dots_q8_0_avx2<2>(b, x, n_blocks, y);
    case 3: return dots_q8_0_avx2<3>(b, x, n_blocks, y);
    default: return dots_q8_0_avx2<4>(b, x, n_blocks, y);
  }
}

#endif

RowDots row_dots(BlockFormat f, MatmulImpl impl) {
#ifdef ACTORLM_BLOCK_MATMUL_AVX2
  if (impl == MatmulImpl::best) return f == BlockFormat::q4_1 ? dots_avx2_q4_1 : dots_avx2_q8_0;
#else
  (void)impl;
#endif
  return f == BlockFormat::q4_1 ? dots_scalar_q4_1 : dots_scalar_q8_0;
}

// max |x_j| over a block, NaN if the block holds a NaN.
float block_amax(const float* xb) {
#ifdef ACTORLM_BLOCK_MATMUL_AVX2
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 mx = _mm256_setzero_ps(), unordered = _mm256_setzero_ps();
  for (int64_t j = 0; j < block_values; j += 8) {
    __m256 v = _mm256_loadu_ps(xb + j);
    mx = _mm256_max_ps(mx, _mm256_and_ps(v, abs_mask));
    unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(unordered) != 0) return NAN;
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
#else
  float amax = 0.0f;
  for (int64_t j = 0; j < block_values; ++j) {
    if (std::isnan(xb[j])) return NAN;
    amax = std::max(amax, std::fabs(xb[j]));
  }
  return amax;
#endif
}

// q_j = x_j * inv rounded to nearest, ties to even (nearbyint in the default
// rounding mode, which the AVX2 conversion also uses: both branches give the
// same values); returns sum_j q_j. With inv = q_max / amax, |x_j * inv| is
// below 32767.01, so nothing needs clipping.
int32_t round_block(const float* xb, float inv, int16_t* q) {
#ifdef ACTORLM_BLOCK_MATMUL_AVX2
  const __m256 vinv = _mm256_set1_ps(inv);
  __m256i total = _mm256_setzero_si256();
  for (int64_t j = 0; j < block_values; j += 16) {
    __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + j), vinv));
    __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + j + 8), vinv));
    total = _mm256_add_epi32(total, _mm256_add_epi32(a, b));
    // packs interleaves the 128-bit lanes of a and b; the permute restores order.
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + j), packed);
  }
  __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
  t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4e));
  t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xb1));
  return _mm_cvtsi128_si32(t4);
#else
  int32_t sum = 0;
  for (int64_t j = 0; j < block_values; ++j) {
    q[j] = static_cast<int16_t>(std::nearbyint(xb[j] * inv));
    sum += q[j];
  }
  return sum;
#endif
}

void quantize_block(const float* xb, int16_t* q, float* scale, float* sum) {
  const float amax = block_amax(xb);
  // A block of zeros, one whose amax is inf or NaN (scale inf or NaN: every
  // product becomes NaN, where float32 gives inf or NaN), or one below
  // ~1e-34 (q_max / amax overflows; such a block adds nothing visible) gets
  // q = 0.
  const float inv = q_max / amax;
  int32_t q_sum = 0;
  if (amax > 0.0f && inv > 0.0f && std::isfinite(inv)) {
    q_sum = round_block(xb, inv, q);
  } else {
    std::fill(q, q + block_values, int16_t{0});
  }
  *scale = amax / q_max;
  *sum = *scale * static_cast<float>(q_sum);
}

}  // namespace

int64_t block_bytes(BlockFormat f) {
  switch (f) {
    case BlockFormat::q4_1: return q4_1_bytes;
    case BlockFormat::q8_0: return q8_0_bytes;
    case BlockFormat::none: break;
  }
  return 0;
}

bool block_matmul_supported(const MatrixView& w) {
  return w.blocks != nullptr && block_bytes(w.format) > 0 && w.cols > 0 && w.cols % block_values == 0;
}

void prepare_activations(int64_t rows, int64_t cols, BlockActivations& out) {
  out.rows = rows;
  out.cols = cols;
  out.q.resize(static_cast<size_t>(rows * cols));
  out.scale.resize(static_cast<size_t>(rows * cols / block_values));
  out.sum.resize(static_cast<size_t>(rows * cols / block_values));
}

void quantize_rows(const float* x, int64_t begin, int64_t end, BlockActivations& out) {
  for (int64_t i = begin * out.cols / block_values; i < end * out.cols / block_values; ++i) {
    quantize_block(x + i * block_values, out.q.data() + i * block_values, &out.scale[static_cast<size_t>(i)],
                   &out.sum[static_cast<size_t>(i)]);
  }
}

// Weight rows in tiles of 16 (a tile of Q4_1 rows of 1536 is 15 KB, within
// L1) against every x row, max_group x rows at a time, so a batch reads each
// weight once from memory. The tiling and grouping change which element is
// computed when, never how.
void block_matmul_rows(const MatrixView& w, const BlockActivations& x, float* out, int64_t begin, int64_t end,
                       bool accumulate, MatmulImpl impl) {
  constexpr int64_t tile = 16;
  const int64_t n_blocks = w.cols / block_values;
  const int64_t row_bytes = n_blocks * block_bytes(w.format);
  const RowDots dots = row_dots(w.format, impl);
  XRow group[max_group];
  float y[max_group];
  for (int64_t r0 = begin; r0 < end; r0 += tile) {
    const int64_t r1 = std::min(end, r0 + tile);
    for (int64_t t0 = 0; t0 < x.rows; t0 += max_group) {
      const int count = static_cast<int>(std::min<int64_t>(max_group, x.rows - t0));
      for (int n = 0; n < count; ++n) {
        const int64_t t = t0 + n;
        group[n] = {x.q.data() + t * x.cols, x.scale.data() + t * n_blocks, x.sum.data() + t * n_blocks};
      }
      for (int64_t r = r0; r < r1; ++r) {
        dots(w.blocks + r * row_bytes, group, count, n_blocks, y);
        for (int n = 0; n < count; ++n) {
          float& o = out[(t0 + n) * w.rows + r];
          o = accumulate ? o + y[n] : y[n];
        }
      }
    }
  }
}

}  // namespace actorlm::cpu
