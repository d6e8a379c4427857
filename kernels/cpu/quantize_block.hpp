#pragma once
// Activation quantization of one 32-value block (quantized_matmul.hpp's q8_0
// and q8_1) and of one 256-value block (q8_K), in an anonymous namespace: included by quantized_matmul.cpp
// (the build's flags) and by the x86 ISA translation units, each copy
// compiled for its own ISA (the AVX-512 form where the unit has AVX-512).
// Every copy gives the same bytes. Compiled with -ffp-contract=off: the
// product x * (1 / d) is rounded to float before it is rounded to an
// integer, as llama.cpp does (a fused multiply-add there moved
// teacher-forced agreement with llama.cpp from 98.08% to 97.45%).

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/quantized_matmul.hpp"
#include "kernels/half.hpp"

namespace actorlm::cpu {
namespace {

// The conversion instructions where the build has them (the same rounding,
// to nearest even, as the portable functions; only a NaN's payload could
// differ, and no NaN reaches here): twice per block, the portable pair was a
// third of a block's quantization.
inline float round_to_half(float v) {
#if defined(__F16C__)
  return _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT));
#else
  return f16_to_f32(f32_to_f16(v));
#endif
}

// nearbyint for |v| < 2^22 in the default rounding mode (ties to even):
// adding and taking away 1.5 * 2^23 leaves v rounded to an integer. Unlike
// std::nearbyint, loops over it vectorize.
inline int32_t round_even(float v) {
  constexpr float magic = 12582912.0f;
  return static_cast<int32_t>((v + magic) - magic);
}

// A block holding inf or NaN gets d = NaN (its products become NaN, as they
// would in float32); one whose scale would underflow (largest magnitude below
// ~1e-30, adding nothing visible) or that is all zeros gets q = 0, d = 0.
// Returns false in those cases, having filled the block.
inline bool degenerate_block(int64_t n, float amax, bool finite, int8_t* q, float* d) {
  if (finite && amax >= 1e-30f) return false;
  std::memset(q, 0, static_cast<size_t>(n));
  *d = finite ? 0.0f : NAN;
  return true;
}

// q8_0 / q8_1: 32 values, q = round(x * (1 / d)) with d = max|x| / 127
// (ties to even, as llama.cpp's SIMD quantizers), then d stored as f16, and
// q8_1's sum s = d * sum q (unrounded d) as f16 too. Matching llama.cpp this
// closely matters: with s = f16(d) * sum q instead, teacher-forced agreement
// on the default Q4_1 model dropped from 98.1% to 97.99%.
// Returns the sum of q (what quantize_rows keeps as sum32).
inline int32_t quantize_block_32(const float* x, bool f16_sum, int8_t* q, float* d, float* s) {
  float amax = 0.0f;
  bool nan = false;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  // The whole block in two 16-lane vectors (a maximum is exact in any
  // order; a NaN is flagged apart, since max ignores it).
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  nan = (_mm512_cmp_ps_mask(x0, x0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(x1, x1, _CMP_UNORD_Q)) != 0;
  const __m512 m = _mm512_maskz_max_ps(0xFFFF, _mm512_abs_ps(x0), _mm512_abs_ps(x1));
  // (The masked extracts: GCC 12's unmasked ones trip -Wmaybe-uninitialized.)
  __m256 m8 = _mm256_max_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(m), 0)),
                            _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(m), 1)));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
#else
  // max |x| eight lanes at a time (GCC vector extension: the compiler did
  // not vectorize the scalar loop); a NaN lane is flagged apart, since
  // comparisons ignore it.
  using f8 = float __attribute__((vector_size(32)));
  using i8 = int32_t __attribute__((vector_size(32)));
  f8 lanes{};
  i8 nan_lanes{};
  for (int64_t j = 0; j < block_values; j += 8) {
    i8 bits;
    std::memcpy(&bits, x + j, sizeof bits);
    f8 v, a;
    std::memcpy(&v, &bits, sizeof v);
    bits &= 0x7fffffff;
    std::memcpy(&a, &bits, sizeof a);
    nan_lanes |= v != v;
    lanes = a > lanes ? a : lanes;
  }
  for (int i = 0; i < 8; ++i) {
    amax = std::max(amax, lanes[i]);
    nan |= nan_lanes[i] != 0;
  }
#endif
  const bool finite = !nan && std::isfinite(amax);
  if (degenerate_block(block_values, amax, finite, q, d)) {
    *s = *d;
    return 0;
  }
  const float scale = amax / 127.0f;
  const float inv = 1.0f / scale;
  int32_t sum = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  // round_even and the clamp below, 16 lanes at a time. (The compiler's
  // vectorization of that loop built the int8 vector through the stack and
  // stalled on the reload.)
  constexpr __mmask16 all = 0xFFFF;
  const __m512 vinv = _mm512_set1_ps(inv), magic = _mm512_set1_ps(12582912.0f);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  __m512i sums = _mm512_setzero_si512();
  for (int h = 0; h < 2; ++h) {
    const __m512 t = _mm512_mul_ps(h == 0 ? x0 : x1, vinv);
    const __m512 r = _mm512_sub_ps(_mm512_add_ps(t, magic), magic);
    const __m512i v = _mm512_maskz_min_epi32(all, _mm512_maskz_max_epi32(all, _mm512_maskz_cvttps_epi32(all, r), lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * h), _mm512_maskz_cvtepi32_epi8(all, v));
    sums = _mm512_add_epi32(sums, v);
  }
  __m256i s8 = _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xF, sums, 0), _mm512_maskz_extracti64x4_epi64(0xF, sums, 1));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
  s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
  sum = _mm_cvtsi128_si32(_mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1)));
#else
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < block_values; ++j) {
    q[j] = static_cast<int8_t>(std::clamp(round_even(x[j] * inv), -127, 127));
    sum += q[j];
  }
#endif
  *d = round_to_half(scale);
  *s = f16_sum ? round_to_half(scale * static_cast<float>(sum)) : *d * static_cast<float>(sum);
  return sum;
}

// q8_K (the K-quants' activations): 256 values, d = -max / 127 for the value
// of largest magnitude max (the first, on a tie), q = round(x / d) (at most
// 127), d and s = d * sum q repeated for each 32 of them; sum32 gets each
// 32's sum of q, and pairs the int16 pairs the K-quant kernels read (the 8
// sums of 32 as 4 pairs, then the 16 sums of 16 as 8 pairs).
inline void quantize_block_256(const float* x, int8_t* q, float* d, float* s, int32_t* sum32, int32_t* pairs) {
  constexpr int64_t n = 256;
  // The largest magnitude, in 8 lanes (exact in any order), and a probe
  // that x * 0 turns NaN if any value is inf or NaN; then the first value
  // of that magnitude, whose sign d takes. (One pass with a branch per
  // value, which does not vectorize, was 5% of a K-quant model's prefill;
  // compiled without AVX, this function was still 10% of it.)
  using f8 = float __attribute__((vector_size(32)));
  f8 amax8{}, probe8{};
  for (int64_t j = 0; j < n; j += 8) {
    f8 v;
    std::memcpy(&v, x + j, sizeof v);
    const f8 a = v < 0.0f ? -v : v;
    amax8 = a > amax8 ? a : amax8;
    probe8 += v * 0.0f;
  }
  float amax = 0.0f, probe = 0.0f;
  for (int l = 0; l < 8; ++l) {
    amax = std::max(amax, amax8[l]);
    probe += probe8[l];
  }
  const bool finite = probe == 0.0f;
  float max = 0.0f;
  for (int64_t j = 0; finite && j < n; ++j) {
    if (std::fabs(x[j]) == amax) {
      max = x[j];
      break;
    }
  }
  float scale = 0.0f;
  if (degenerate_block(n, amax, finite, q, &scale)) {
    std::fill(d, d + n / block_values, scale);
    std::fill(s, s + n / block_values, scale);
    std::fill(sum32, sum32 + n / block_values, 0);
    std::fill(pairs, pairs + 12, 0);
    return;
  }
  const float inv = -127.0f / max;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) q[j] = static_cast<int8_t>(std::min(127, round_even(inv * x[j])));
  scale = 1.0f / inv;
  int32_t sum16[16];
  for (int64_t h = 0; h < 16; ++h) {
    int32_t sum = 0;
    for (int64_t j = 0; j < 16; ++j) sum += q[16 * h + j];
    sum16[h] = sum;
  }
  for (int64_t b = 0; b < n / block_values; ++b) {
    sum32[b] = sum16[2 * b] + sum16[2 * b + 1];
    d[b] = scale;
    s[b] = scale * static_cast<float>(sum32[b]);
  }
  // |sum| <= 32 * 127 fits an int16.
  auto pair = [](int32_t lo, int32_t hi) {
    return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(lo)) |
                                (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16));
  };
  for (int64_t v = 0; v < 4; ++v) pairs[v] = pair(sum32[2 * v], sum32[2 * v + 1]);
  for (int64_t v = 0; v < 8; ++v) pairs[4 + v] = pair(sum16[2 * v], sum16[2 * v + 1]);
}

}  // namespace
}  // namespace actorlm::cpu
