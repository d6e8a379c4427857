#include "kernels/cpu/quantized_matmul.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kernels/cpu/quantized_matmul_isa.hpp"
#include "kernels/half.hpp"

namespace actorlm::cpu {
namespace {

bool cpu_has(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::portable: return true;
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::avx_vnni: return cpu_has(Isa::avx2) && __builtin_cpu_supports("avxvnni");
    case Isa::avx512_vnni:
      return cpu_has(Isa::avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return isa == Isa::portable;
#endif
}

// The widest available ISA, or a narrower one named by ACTORLM_CPU_ISA
// (portable, avx2, avx_vnni, avx512_vnni) for comparisons; a name that is
// unknown or not available here is ignored.
Isa detect() {
  Isa best = Isa::portable;
  for (Isa isa : {Isa::avx2, Isa::avx_vnni, Isa::avx512_vnni}) {
    if (cpu_has(isa)) best = isa;
  }
  if (const char* env = std::getenv("ACTORLM_CPU_ISA")) {
    for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx_vnni, Isa::avx512_vnni}) {
      if (std::string_view(env) == isa_name(isa) && cpu_has(isa)) return isa;
    }
  }
  return best;
}

// The conversion instructions where the build has them (the same rounding,
// to nearest even, as the portable functions; only a NaN's payload could
// differ, and no NaN reaches here): twice per block, the portable pair was a
// third of a block's quantization.
float round_to_half(float v) {
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
bool degenerate_block(int64_t n, float amax, bool finite, int8_t* q, float* d) {
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
int32_t quantize_32(const float* x, bool f16_sum, int8_t* q, float* d, float* s) {
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

// q8_K: 256 values, d = -max / 127 for the value of largest magnitude max, q
// = round(x / d) (at most 127). d is repeated for each 32 of them.
void quantize_256(const float* x, int8_t* q, float* d, float* s) {
  constexpr int64_t n = 256;
  float amax = 0.0f, max = 0.0f;
  bool finite = true;
  for (int64_t j = 0; j < n; ++j) {
    finite &= std::isfinite(x[j]);
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  float scale = 0.0f;
  if (degenerate_block(n, amax, finite, q, &scale)) {
    std::fill(d, d + n / block_values, scale);
    std::fill(s, s + n / block_values, scale);
    return;
  }
  const float inv = -127.0f / max;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) q[j] = static_cast<int8_t>(std::min(127, round_even(inv * x[j])));
  scale = 1.0f / inv;
  for (int64_t b = 0; b < n / block_values; ++b) {
    int32_t sum = 0;
    for (int64_t j = 0; j < block_values; ++j) sum += q[b * block_values + j];
    d[b] = scale;
    s[b] = scale * static_cast<float>(sum);
  }
}

// Any type ggml_type.hpp dequantizes: a weight row is widened once and
// multiplied in float with every x row (its int8 copy for the integer types,
// so every ISA computes the same W x~).
void portable_rows(const MatrixView& w, const Activations& x, float* out, int64_t begin, int64_t end,
                   bool accumulate) {
  const size_t row_bytes = ggml_row_bytes(w.type, w.cols);
  const bool integer = x.scheme != ActivationScheme::none;
  const int64_t n_blocks = w.cols / block_values;
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = begin; r < end; ++r) {
    dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * row_bytes, row.data(),
                   w.cols);
    for (int64_t t = 0; t < x.rows; ++t) {
      float y = 0.0f;
      if (integer) {
        const int8_t* q = x.q.data() + t * x.cols;
        const float* d = x.d.data() + t * n_blocks;
        const float* s = x.s.data() + t * n_blocks;
        for (int64_t b = 0; b < n_blocks; ++b) {
          float block = 0.0f;
          int32_t q_sum = 0;
          for (int64_t j = 0; j < block_values; ++j) {
            block += row[static_cast<size_t>(b * block_values + j)] * static_cast<float>(q[b * block_values + j]);
            q_sum += q[b * block_values + j];
          }
          y += d[b] * block;
          if (x.scheme == ActivationScheme::q8_1) {
            // q8_1's f16 block sum is not exactly d * sum q; the SIMD
            // kernels multiply the block's min (the f16 after its scale in
            // Q4_1 and Q5_1) by s itself, and so does this.
            const uint8_t* block_bytes = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * row_bytes +
                                         static_cast<size_t>(b) * ggml_block_bytes(w.type);
            uint16_t min;
            std::memcpy(&min, block_bytes + 2, sizeof min);
            y += f16_to_f32(min) * (s[b] - d[b] * static_cast<float>(q_sum));
          }
        }
      } else {
        const float* xr = x.x + t * x.cols;
        for (int64_t j = 0; j < w.cols; ++j) y += row[static_cast<size_t>(j)] * xr[j];
      }
      float& o = out[t * w.rows + r];
      o = accumulate ? o + y : y;
    }
  }
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::portable: return "portable";
    case Isa::avx2: return "avx2";
    case Isa::avx_vnni: return "avx_vnni";
    case Isa::avx512_vnni: return "avx512_vnni";
  }
  return "?";
}

Isa best_isa() {
  static const Isa isa = detect();
  return isa;
}

bool isa_available(Isa isa) { return cpu_has(isa); }

ActivationScheme activation_scheme(GgmlType weights) {
  switch (weights) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0: return ActivationScheme::q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return ActivationScheme::q8_1;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: return ActivationScheme::q8_K;
    default: return ActivationScheme::none;
  }
}

bool matmul_supported(const MatrixView& w) {
  if (w.data == nullptr || w.cols <= 0 || !ggml_type_supported(static_cast<uint32_t>(w.type))) return false;
  // Float formats take any width; the block types whole blocks (32 or 256
  // values, so their activations quantize per 32 too).
  return w.cols % static_cast<int64_t>(ggml_block_elements(w.type)) == 0 &&
         (activation_scheme(w.type) == ActivationScheme::none || w.cols % block_values == 0);
}

void prepare_activations(const float* x, int64_t rows, int64_t cols, GgmlType weights, Activations& out) {
  out.rows = rows;
  out.cols = cols;
  out.scheme = activation_scheme(weights);
  out.x = x;
  if (out.scheme == ActivationScheme::none) return;
  out.q.resize(static_cast<size_t>(rows * cols));
  out.d.resize(static_cast<size_t>(rows * cols / block_values));
  out.s.resize(static_cast<size_t>(rows * cols / block_values));
  out.sum32.resize(static_cast<size_t>(rows * cols / block_values));
  out.pairs.resize(out.scheme == ActivationScheme::q8_K ? static_cast<size_t>(rows * cols / 256 * 12) : 0);
}

void quantize_rows(int64_t begin, int64_t end, Activations& out) {
  if (out.scheme == ActivationScheme::none) return;
  const int64_t step = out.scheme == ActivationScheme::q8_K ? 256 : block_values;
  for (int64_t at = begin * out.cols; at < end * out.cols; at += step) {
    const auto b = static_cast<size_t>(at / block_values);
    if (step == block_values) {
      out.sum32[b] = quantize_32(out.x + at, out.scheme == ActivationScheme::q8_1, out.q.data() + at, &out.d[b], &out.s[b]);
      continue;
    }
    quantize_256(out.x + at, out.q.data() + at, &out.d[b], &out.s[b]);
    int32_t sum16[16];
    for (int64_t h = 0; h < step / 16; ++h) {
      int32_t sum = 0;
      for (int64_t j = 0; j < 16; ++j) sum += out.q[static_cast<size_t>(at + 16 * h + j)];
      sum16[h] = sum;
    }
    for (int64_t c = 0; c < step / block_values; ++c) out.sum32[b + static_cast<size_t>(c)] = sum16[2 * c] + sum16[2 * c + 1];
    // |sum| <= 32 * 127 fits an int16.
    auto pair = [](int32_t lo, int32_t hi) {
      return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(lo)) |
                                  (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16));
    };
    int32_t* p = out.pairs.data() + at / 256 * 12;
    for (int64_t v = 0; v < 4; ++v) p[v] = pair(out.sum32[b + 2 * v], out.sum32[b + 2 * v + 1]);
    for (int64_t v = 0; v < 8; ++v) p[4 + v] = pair(sum16[2 * v], sum16[2 * v + 1]);
  }
}

void matmul_rows(const MatrixView& w, const Activations& x, float* out, int64_t begin, int64_t end, bool accumulate,
                 Isa isa) {
#if defined(__x86_64__)
  if (w.packed != nullptr && x.scheme != ActivationScheme::none) {
    const auto& packed = *static_cast<const PackedMatrix*>(w.packed);
    if (isa == Isa::avx512_vnni && integer_matmul_avx512_vnni(packed, x, out, begin, end, accumulate)) return;
    if (isa == Isa::avx_vnni && integer_matmul_avx_vnni(packed, x, out, begin, end, accumulate)) return;
    if (isa == Isa::avx2 && integer_matmul_avx2(packed, x, out, begin, end, accumulate)) return;
  }
#endif
  portable_rows(w, x, out, begin, end, accumulate);
}

}  // namespace actorlm::cpu
