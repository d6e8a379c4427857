#pragma once
// The integer kernels of quantized_matmul.hpp for x86, written once over a
// `Dot` policy (the one instruction that differs between AVX2 and AVX-512
// VNNI) and included only by the two ISA translation units, each compiled
// for its ISA. Everything here has internal linkage, so the two copies never
// meet at link time (no ODR trouble from different code for one name).
//
// Each weight type has a decoder that turns one block (32 values, or a
// 256-value K-quant super-block) into 32-value chunks: 32 bytes of integer
// weights in value order, a per-lane float scale `a` (the dot products leave
// eight int32 lanes, lane k summing values 4k..4k+3; Q6_K's two 16-value
// halves have different scales) and, for the types with a min, `b`:
//   signed types (Q4_0, Q5_0, Q8_0, Q6_K):   value = a * w       (w in [-128, 127])
//   unsigned types (Q4_1, Q5_1, Q4_K, Q5_K): value = a * w + b   (w in [0, 31])
// Against an activation block (d, q[32], s = d * sum q):
//   sum_j value_j * d q_j = a * d * (sum_j w_j q_j) + b * s.
// Signed weights go through |w| and sign(q, w) (vpsignb), as the dot
// instructions take one unsigned operand; |w| <= 128 and |q| <= 127 keep
// vpmaddubsw's int16 pair sums (<= 32,512) from saturating.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/quantized_matmul.hpp"

namespace actorlm::cpu {
namespace {

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

inline __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(15)); }
inline __m256i high_nibbles(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15)); }

// 16 bytes of packed nibbles -> 32 values: low nibbles are values 0..15,
// high nibbles 16..31 (ggml's Q4_0/Q4_1/Q5_0/Q5_1 order).
inline __m256i split_nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

// Byte j = 16 where bit j of the little-endian 32-bit mask at p is set.
inline __m256i fifth_bits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, sizeof bits);
  // Byte j takes byte j / 8 of the mask, then tests its bit j % 8.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

// Scale and min of K-quant sub-block j (0..7): eight 6-bit pairs in 12 bytes.
inline void k_scale_min(int j, const uint8_t* s, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// ------------------------------------------------------------ decoders
// chunks(block, f) calls f(chunk, w, a, b) for each 32-value chunk in order.

struct Q4_0 {
  static constexpr int64_t values = 32, bytes = 18;
  static constexpr bool is_signed = true;
  template <class F>
  static void chunks(const uint8_t* b, F&& f) {
    f(0, _mm256_sub_epi8(split_nibbles(b + 2), _mm256_set1_epi8(8)), _mm256_set1_ps(f16_at(b)), 0.0f);
  }
};

struct Q4_1 {
  static constexpr int64_t values = 32, bytes = 20;
  static constexpr bool is_signed = false;
  template <class F>
  static void chunks(const uint8_t* b, F&& f) {
    f(0, split_nibbles(b + 4), _mm256_set1_ps(f16_at(b)), f16_at(b + 2));
  }
};

struct Q5_0 {
  static constexpr int64_t values = 32, bytes = 22;
  static constexpr bool is_signed = true;
  template <class F>
  static void chunks(const uint8_t* b, F&& f) {
    const __m256i u = _mm256_or_si256(split_nibbles(b + 6), fifth_bits(b + 2));
    f(0, _mm256_sub_epi8(u, _mm256_set1_epi8(16)), _mm256_set1_ps(f16_at(b)), 0.0f);
  }
};

struct Q5_1 {
  static constexpr int64_t values = 32, bytes = 24;
  static constexpr bool is_signed = false;
  template <class F>
  static void chunks(const uint8_t* b, F&& f) {
    f(0, _mm256_or_si256(split_nibbles(b + 8), fifth_bits(b + 4)), _mm256_set1_ps(f16_at(b)), f16_at(b + 2));
  }
};

struct Q8_0 {
  static constexpr int64_t values = 32, bytes = 34;
  static constexpr bool is_signed = true;
  template <class F>
  static void chunks(const uint8_t* b, F&& f) {
    f(0, load32(b + 2), _mm256_set1_ps(f16_at(b)), 0.0f);
  }
};

// 256 values: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes
// of nibbles; sub-blocks 2k and 2k+1 are the low and high nibbles of bytes
// [32k, 32k + 32).
struct Q4_K {
  static constexpr int64_t values = 256, bytes = 144;
  static constexpr bool is_signed = false;
  template <class F>
  static void chunks(const uint8_t* b, F&& f) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    for (int k = 0; k < 4; ++k) {
      const __m256i q = load32(b + 16 + 32 * k);
      int sc, mn;
      k_scale_min(2 * k, b + 4, &sc, &mn);
      f(2 * k, low_nibbles(q), _mm256_set1_ps(d * static_cast<float>(sc)), -dmin * static_cast<float>(mn));
      k_scale_min(2 * k + 1, b + 4, &sc, &mn);
      f(2 * k + 1, high_nibbles(q), _mm256_set1_ps(d * static_cast<float>(sc)), -dmin * static_cast<float>(mn));
    }
  }
};

// Q4_K plus 32 bytes of fifth bits: bit j of byte l is value l of sub-block j.
struct Q5_K {
  static constexpr int64_t values = 256, bytes = 176;
  static constexpr bool is_signed = false;
  template <class F>
  static void chunks(const uint8_t* b, F&& f) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const __m256i high = load32(b + 16);
    const __m256i one = _mm256_set1_epi8(1);
    for (int k = 0; k < 4; ++k) {
      const __m256i q = load32(b + 48 + 32 * k);
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * k), one), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * k + 1), one), 4);
      int sc, mn;
      k_scale_min(2 * k, b + 4, &sc, &mn);
      f(2 * k, _mm256_or_si256(low_nibbles(q), h0), _mm256_set1_ps(d * static_cast<float>(sc)),
        -dmin * static_cast<float>(mn));
      k_scale_min(2 * k + 1, b + 4, &sc, &mn);
      f(2 * k + 1, _mm256_or_si256(high_nibbles(q), h1), _mm256_set1_ps(d * static_cast<float>(sc)),
        -dmin * static_cast<float>(mn));
    }
  }
};

// 256 values in two halves of 128: low 4 bits in ql (64 bytes per half),
// high 2 bits in qh (32 bytes per half), an int8 scale per 16 values, one
// f16 d at the end; value = d * scale * (q - 32).
struct Q6_K {
  static constexpr int64_t values = 256, bytes = 210;
  static constexpr bool is_signed = true;
  template <class F>
  static void chunks(const uint8_t* b, F&& f) {
    const float d = f16_at(b + 208);
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
    const __m256i three = _mm256_set1_epi8(3), offset = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; ++h) {
      const __m256i q0 = load32(b + 64 * h), q1 = load32(b + 64 * h + 32);
      const __m256i hb = load32(b + 128 + 32 * h);
      const int8_t* sc = scales + 8 * h;
      auto emit = [&](int c, __m256i low4, __m256i top2) {
        const __m256i w = _mm256_sub_epi8(_mm256_or_si256(low4, _mm256_slli_epi16(top2, 4)), offset);
        const __m256 a = _mm256_set_m128(_mm_set1_ps(d * static_cast<float>(sc[2 * c + 1])),
                                         _mm_set1_ps(d * static_cast<float>(sc[2 * c])));
        f(4 * h + c, w, a, 0.0f);
      };
      emit(0, low_nibbles(q0), _mm256_and_si256(hb, three));
      emit(1, low_nibbles(q1), _mm256_and_si256(_mm256_srli_epi16(hb, 2), three));
      emit(2, high_nibbles(q0), _mm256_and_si256(_mm256_srli_epi16(hb, 4), three));
      emit(3, high_nibbles(q1), _mm256_and_si256(_mm256_srli_epi16(hb, 6), three));
    }
  }
};

// ------------------------------------------------------------ kernels

inline float horizontal_sum(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_movehdup_ps(a));
  return _mm_cvtss_f32(a);
}

// One quantized x row.
struct XRow {
  const int8_t* q;
  const float* d;
  const float* s;
};

inline constexpr int max_group = 8;

// y[n] = weight row `row` · x[n] for n < N. The row's chunks are decoded once
// for all N x rows; each x row has its own accumulators and sees the same
// operations in the same order for every N (batch invariance).
template <class D, class Dot, int N>
void row_dots(const uint8_t* row, const XRow* x, int64_t n_blocks, float* y) {
  constexpr int64_t chunks_per_block = D::values / 32;
  __m256 acc[N];
  float min_acc[N];
  for (int n = 0; n < N; ++n) {
    acc[n] = _mm256_setzero_ps();
    min_acc[n] = 0.0f;
  }
  for (int64_t i = 0; i < n_blocks; ++i) {
    D::chunks(row + i * D::bytes, [&](int c, __m256i w, __m256 a, float b) {
      const int64_t chunk = i * chunks_per_block + c;
      [[maybe_unused]] __m256i magnitude;
      if constexpr (D::is_signed) magnitude = _mm256_sign_epi8(w, w);
      for (int n = 0; n < N; ++n) {
        const __m256i q = load32(x[n].q + chunk * 32);
        __m256i sum;
        if constexpr (D::is_signed) {
          sum = Dot::unsigned_signed(magnitude, _mm256_sign_epi8(q, w));
        } else {
          sum = Dot::unsigned_signed(w, q);
        }
        acc[n] = _mm256_fmadd_ps(_mm256_mul_ps(a, _mm256_set1_ps(x[n].d[chunk])), _mm256_cvtepi32_ps(sum), acc[n]);
        if constexpr (!D::is_signed) min_acc[n] = std::fma(b, x[n].s[chunk], min_acc[n]);
      }
    });
  }
  for (int n = 0; n < N; ++n) y[n] = horizontal_sum(acc[n]) + min_acc[n];
}

// Weight rows in tiles of 16 (a tile of 1,536-wide Q4_K rows is 13 KB, in
// L1) against every x row, max_group x rows at a time, so a batch reads each
// weight once from memory. The tiling and grouping change which element is
// computed when, never how.
template <class D, class Dot>
void tile_loop(const MatrixView& w, const Activations& x, float* out, int64_t begin, int64_t end, bool accumulate) {
  constexpr int64_t tile = 16;
  const int64_t n_blocks = w.cols / D::values;
  const int64_t row_bytes = n_blocks * D::bytes;
  const int64_t x_blocks = x.cols / 32;
  const auto* base = static_cast<const uint8_t*>(w.data);
  XRow group[max_group];
  float y[max_group];
  for (int64_t r0 = begin; r0 < end; r0 += tile) {
    const int64_t r1 = std::min(end, r0 + tile);
    for (int64_t t0 = 0; t0 < x.rows; t0 += max_group) {
      const int count = static_cast<int>(std::min<int64_t>(max_group, x.rows - t0));
      for (int n = 0; n < count; ++n) {
        const int64_t t = t0 + n;
        group[n] = {x.q.data() + t * x.cols, x.d.data() + t * x_blocks, x.s.data() + t * x_blocks};
      }
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = base + r * row_bytes;
        switch (count) {
          case 1: row_dots<D, Dot, 1>(row, group, n_blocks, y); break;
          case 2: row_dots<D, Dot, 2>(row, group, n_blocks, y); break;
          case 3: row_dots<D, Dot, 3>(row, group, n_blocks, y); break;
          case 4: row_dots<D, Dot, 4>(row, group, n_blocks, y); break;
          case 5: row_dots<D, Dot, 5>(row, group, n_blocks, y); break;
          case 6: row_dots<D, Dot, 6>(row, group, n_blocks, y); break;
          case 7: row_dots<D, Dot, 7>(row, group, n_blocks, y); break;
          default: row_dots<D, Dot, 8>(row, group, n_blocks, y); break;
        }
        for (int n = 0; n < count; ++n) {
          float& o = out[(t0 + n) * w.rows + r];
          o = accumulate ? o + y[n] : y[n];
        }
      }
    }
  }
}

// Returns false for a type without an integer kernel.
template <class Dot>
bool integer_matmul(const MatrixView& w, const Activations& x, float* out, int64_t begin, int64_t end,
                    bool accumulate) {
  switch (w.type) {
    case GgmlType::Q4_0: tile_loop<Q4_0, Dot>(w, x, out, begin, end, accumulate); return true;
    case GgmlType::Q4_1: tile_loop<Q4_1, Dot>(w, x, out, begin, end, accumulate); return true;
    case GgmlType::Q5_0: tile_loop<Q5_0, Dot>(w, x, out, begin, end, accumulate); return true;
    case GgmlType::Q5_1: tile_loop<Q5_1, Dot>(w, x, out, begin, end, accumulate); return true;
    case GgmlType::Q8_0: tile_loop<Q8_0, Dot>(w, x, out, begin, end, accumulate); return true;
    case GgmlType::Q4_K: tile_loop<Q4_K, Dot>(w, x, out, begin, end, accumulate); return true;
    case GgmlType::Q5_K: tile_loop<Q5_K, Dot>(w, x, out, begin, end, accumulate); return true;
    case GgmlType::Q6_K: tile_loop<Q6_K, Dot>(w, x, out, begin, end, accumulate); return true;
    default: return false;
  }
}

}  // namespace
}  // namespace actorlm::cpu
