#pragma once
// The integer kernels of quantized_matmul.hpp for x86, over matrices packed
// by packed_matrix.hpp (8 rows per tile, one row per 32-bit lane), written
// once over a `Dot` policy (the instructions that differ between AVX2 and
// AVX-512 VNNI) and included only by the two ISA translation units, each
// compiled for its ISA. Everything here has internal linkage, so the two
// copies never meet at link time.
//
// For one activation row and one 32-value chunk, eight dot instructions
// (dword k of the weights, lane r = row r, against dword k of the
// activation block broadcast to every lane) leave the chunk's exact integer
// sum for 8 rows in 8 lanes; the scales are then applied once per block (or
// K-quant super-block) with the same float operations in the same order for
// every element, whatever the number of activation rows and whatever rows a
// thread gets, so results are batch invariant. Integer sums are exact:
//   Q4_0, Q5_0, Q8_0:  y += (d_w d_x) * (Σ u q - offset Σ q)
//   Q4_1, Q5_1:        y += (d_w d_x) * Σ u q  +  m_w * s_x
//   Q4_K, Q5_K:        y += (d d_x) * Σ_j sc_j Σ u q  -  (dmin d_x) * Σ_j mn_j Σ_j q
//   Q6_K:              y += (d d_x) * Σ_j sc_j (Σ u q - 32 Σ_j q)   (j: 16-value sub-blocks)

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/packed_matrix.hpp"
#include "kernels/cpu/quantized_matmul.hpp"

namespace actorlm::cpu {
namespace {

// Everything on the hot path is forced inline: GCC otherwise kept some of
// these lambdas out of line (their accumulators then live in memory), which
// made the K-quant kernels 3x slower.
#define ACTORLM_HOT inline __attribute__((always_inline))

template <class F, int... K>
ACTORLM_HOT void unroll_sequence(F&& f, std::integer_sequence<int, K...>) {
  (f(std::integral_constant<int, K>{}), ...);
}
// f(integral_constant<int, 0>) ... f(integral_constant<int, N - 1>): shift
// counts and offsets stay compile-time constants.
template <int N, class F>
ACTORLM_HOT void unroll(F&& f) {
  unroll_sequence(f, std::make_integer_sequence<int, N>{});
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// Eight f16 values (one per row of a tile) widened.
inline __m256 halves8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Bits 0-3 of dword K of a chunk, from its four nibble vectors.
template <int K>
inline __m256i low4(const uint8_t* nibbles) {
  const __m256i n = load32(nibbles + 32 * (K % 4));
  if constexpr (K < 4) return _mm256_and_si256(n, _mm256_set1_epi8(15));
  return _mm256_and_si256(_mm256_srli_epi16(n, 4), _mm256_set1_epi8(15));
}

// Bit 4 of dword K, from a 5th-bit vector (bit K of each byte). The 16-bit
// shifts never move a bit across a byte into the kept position.
template <int K>
inline __m256i bit4(const uint8_t* bits) {
  const __m256i b = load32(bits);
  const __m256i s = K < 4 ? _mm256_slli_epi16(b, 4 - K) : _mm256_srli_epi16(b, K - 4);
  return _mm256_and_si256(s, _mm256_set1_epi8(0x10));
}

// Bits 4-5 of dword K, from Q6_K's two 2-bit vectors (bits 2(K % 4) and up).
template <int K>
inline __m256i bits45(const uint8_t* high) {
  const __m256i h = load32(high + 32 * (K / 4));
  constexpr int at = 2 * (K % 4);
  const __m256i s = at < 4 ? _mm256_slli_epi16(h, 4 - at) : _mm256_srli_epi16(h, at - 4);
  return _mm256_and_si256(s, _mm256_set1_epi8(0x30));
}

// 16 bytes, a pair per lane, widened to int16 pairs: unsigned (Q4_K/Q5_K
// mins) or signed (Q6_K scales).
inline __m256i mins16(const uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i scales16(const uint8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Sub-block scale 2p (Odd = false) or 2p + 1 of each lane, from a vector of
// int16 pairs, sign-extended to int32.
template <bool Odd>
inline __m256i pair_half(__m256i v) {
  if constexpr (Odd) return _mm256_srai_epi32(v, 16);
  return _mm256_srai_epi32(_mm256_slli_epi32(v, 16), 16);
}

// One quantized activation row (quantized_matmul.hpp's Activations).
struct XRow {
  const int8_t* q;
  const float* d;
  const float* s;
  const int32_t* sum32;
  const int32_t* pairs;
};

// dot[n] += dwords [K0, K1) of the chunk at value `at` (weights from
// weight(k)) against x[n]. Wide: stored values up to 255 (Q8_0).
// With fewer than 4 rows, odd dwords go to a second accumulator (added at
// the end: integer sums, so the result is the same) for two independent
// dependency chains.
template <class Dot, bool Wide, int N, int K0, int K1, class W>
ACTORLM_HOT void chunk_dots(W&& weight, const XRow* x, int64_t at, __m256i* dot) {
  constexpr bool split = N < 4;
  __m256i odd[N];
  if constexpr (split) {
    for (int n = 0; n < N; ++n) odd[n] = _mm256_setzero_si256();
  }
  unroll<K1 - K0>([&](auto i) __attribute__((always_inline)) {
    constexpr int k = K0 + decltype(i)::value;
    const __m256i w = weight(std::integral_constant<int, k>{});
    for (int n = 0; n < N; ++n) {
      const __m256i q = broadcast4(x[n].q + at + 4 * k);
      __m256i& a = (split && k % 2 == 1) ? odd[n] : dot[n];
      a = Wide ? Dot::dot_wide(a, w, q) : Dot::dot(a, w, q);
    }
  });
  if constexpr (split) {
    for (int n = 0; n < N; ++n) dot[n] = _mm256_add_epi32(dot[n], odd[n]);
  }
}

// ------------------------------------------------------------ types

// The 32-value block types. Unit layout: d[8] (f16), m[8] if Min, the four
// nibble vectors (or Q8_0's eight byte vectors), the 5th-bit vector if Bits 5.
template <int Bits, int Offset, bool Min>
struct Block32 {
  static constexpr bool wide = Bits == 8;
  // Q4_1 and Q5_1 keep llama.cpp's rounding (it has no repacked kernel for
  // them; its dot product converts the eight 4-value partial sums of a block
  // to float separately, accumulates each over the row, and adds the mins'
  // sum at the end). With the whole block's sum converted once instead,
  // teacher-forced agreement with llama.cpp on the default Q4_1 model fell
  // from 98.08% to 97.81%: near ties flip on rounding that small. So these
  // two types carry 8 partial accumulators and one for the mins per
  // activation row; the others one.
  static constexpr int accumulators = Min ? 9 : 1;

  static __m256 finish(const __m256* a) {
    if constexpr (!Min) {
      return a[0];
    } else {
      const __m256 even = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
      const __m256 odd = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
      return _mm256_add_ps(_mm256_add_ps(even, odd), a[8]);
    }
  }

  template <class Dot, int N>
  ACTORLM_HOT static void unit(const uint8_t* p, const XRow* x, int64_t j, __m256* acc) {
    const __m256 d = halves8(p);
    const uint8_t* body = p + (Min ? 32 : 16);
    auto weight = [&](auto k) __attribute__((always_inline)) -> __m256i {
      constexpr int K = decltype(k)::value;
      if constexpr (Bits == 8) {
        return load32(body + 32 * K);
      } else if constexpr (Bits == 5) {
        return _mm256_or_si256(low4<K>(body), bit4<K>(body + 128));
      } else {
        return low4<K>(body);
      }
    };
    if constexpr (Min) {
      const __m256 m = halves8(p + 16);
      __m256 dd[N];
      for (int n = 0; n < N; ++n) dd[n] = _mm256_mul_ps(d, _mm256_set1_ps(x[n].d[j]));
      unroll<8>([&](auto k) __attribute__((always_inline)) {
        constexpr int K = decltype(k)::value;
        const __m256i w = weight(k);
        for (int n = 0; n < N; ++n) {
          const __m256i part = Dot::dot(_mm256_setzero_si256(), w, broadcast4(x[n].q + 32 * j + 4 * K));
          acc[9 * n + K] = _mm256_fmadd_ps(dd[n], _mm256_cvtepi32_ps(part), acc[9 * n + K]);
        }
      });
      for (int n = 0; n < N; ++n) acc[9 * n + 8] = _mm256_fmadd_ps(m, _mm256_set1_ps(x[n].s[j]), acc[9 * n + 8]);
    } else {
      __m256i dot[N];
      for (int n = 0; n < N; ++n) dot[n] = _mm256_setzero_si256();
      chunk_dots<Dot, wide, N, 0, 8>(weight, x, 32 * j, dot);
      // AVX2's wide dot multiplies the signed values and has no offset to remove.
      constexpr int offset = (wide && !Dot::wide_includes_offset) ? 0 : Offset;
      for (int n = 0; n < N; ++n) {
        __m256i sum = dot[n];
        if constexpr (offset != 0) sum = _mm256_sub_epi32(sum, _mm256_set1_epi32(offset * x[n].sum32[j]));
        acc[n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(d, _mm256_set1_ps(x[n].d[j])), acc[n]);
      }
    }
  }
};

using Q4_0 = Block32<4, 8, false>;
using Q4_1 = Block32<4, 0, true>;
using Q5_0 = Block32<5, 16, false>;
using Q5_1 = Block32<5, 0, true>;
using Q8_0 = Block32<8, 128, false>;

// Q4_K and Q5_K super-blocks: d[8], dmin[8], 64 bytes of scales, 64 of mins,
// 8 chunks of nibble vectors, 8 5th-bit vectors if Bits 5.
template <int Bits>
struct KQuant {
  static constexpr int accumulators = 1;
  static __m256 finish(const __m256* a) { return a[0]; }

  template <class Dot, int N>
  ACTORLM_HOT static void unit(const uint8_t* p, const XRow* x, int64_t j, __m256* acc) {
    const uint8_t* scales = p + 32;  // per chunk: 8 rows' scales
    const uint8_t* mins = scales + 64;  // per chunk pair: 8 rows' two mins
    const uint8_t* body = mins + 64;
    const uint8_t* high = body + 8 * 128;
    __m256i sum[N];
    for (int n = 0; n < N; ++n) sum[n] = _mm256_setzero_si256();
    auto chunk = [&](int c) __attribute__((always_inline)) {
      const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 8 * c)));
      auto weight = [&](auto k) __attribute__((always_inline)) -> __m256i {
        constexpr int K = decltype(k)::value;
        if constexpr (Bits == 5) return _mm256_or_si256(low4<K>(body + 128 * c), bit4<K>(high + 32 * c));
        return low4<K>(body + 128 * c);
      };
      __m256i dot[N];
      for (int n = 0; n < N; ++n) dot[n] = _mm256_setzero_si256();
      chunk_dots<Dot, false, N, 0, 8>(weight, x, 256 * j + 32 * c, dot);
      for (int n = 0; n < N; ++n) sum[n] = _mm256_add_epi32(sum[n], _mm256_mullo_epi32(dot[n], sc));
    };
    // With many rows, a rolled loop over the chunks: fully unrolled, the
    // compiler reassociated the 8 chunks' integer sums into a tree and
    // spilled every chunk's dots to the stack to build it. With one or two
    // rows (decode) unrolled. Integer sums: the same result either way.
    if constexpr (N <= 2) {
      unroll<8>([&](auto c) __attribute__((always_inline)) { chunk(decltype(c)::value); });
    } else {
#pragma GCC unroll 1
      for (int c = 0; c < 8; ++c) chunk(c);
    }
    const __m256 d = halves8(p), dmin = halves8(p + 16);
    for (int n = 0; n < N; ++n) {
      const int32_t* pairs = x[n].pairs + 12 * j;  // Σ q per 32 values, as int16 pairs
      __m256i m = _mm256_madd_epi16(mins16(mins), _mm256_set1_epi32(pairs[0]));
      for (int v = 1; v < 4; ++v) {
        m = _mm256_add_epi32(m, _mm256_madd_epi16(mins16(mins + 16 * v), _mm256_set1_epi32(pairs[v])));
      }
      const __m256 dx = _mm256_set1_ps(x[n].d[8 * j]);
      acc[n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[n]), _mm256_mul_ps(d, dx), acc[n]);
      acc[n] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmin, dx), acc[n]);
    }
  }
};

using Q4_K = KQuant<4>;
using Q5_K = KQuant<5>;

// Q6_K super-blocks: d[8], 128 bytes of scales (16 sub-blocks of 16), 8
// chunks of nibble vectors, 8 pairs of 2-bit vectors.
struct Q6_K {
  static constexpr int accumulators = 1;
  static __m256 finish(const __m256* a) { return a[0]; }

  template <class Dot, int N>
  ACTORLM_HOT static void unit(const uint8_t* p, const XRow* x, int64_t j, __m256* acc) {
    const uint8_t* scales = p + 16;  // per chunk: 8 rows' two int8 scales
    const uint8_t* body = scales + 128;
    const uint8_t* high = body + 8 * 128;
    __m256i sum[N];
    for (int n = 0; n < N; ++n) sum[n] = _mm256_setzero_si256();
    auto chunk = [&](int c) __attribute__((always_inline)) {
      auto weight = [&](auto k) __attribute__((always_inline)) -> __m256i {
        constexpr int K = decltype(k)::value;
        return _mm256_or_si256(low4<K>(body + 128 * c), bits45<K>(high + 64 * c));
      };
      __m256i first[N], second[N];  // the chunk's two 16-value sub-blocks
      for (int n = 0; n < N; ++n) first[n] = second[n] = _mm256_setzero_si256();
      chunk_dots<Dot, false, N, 0, 4>(weight, x, 256 * j + 32 * c, first);
      chunk_dots<Dot, false, N, 4, 8>(weight, x, 256 * j + 32 * c, second);
      const __m256i v = scales16(scales + 16 * c);
      const __m256i sc0 = pair_half<false>(v), sc1 = pair_half<true>(v);
      for (int n = 0; n < N; ++n) {
        sum[n] = _mm256_add_epi32(sum[n], _mm256_add_epi32(_mm256_mullo_epi32(first[n], sc0),
                                                           _mm256_mullo_epi32(second[n], sc1)));
      }
    };
    if constexpr (N <= 2) {  // as in KQuant
      unroll<8>([&](auto c) __attribute__((always_inline)) { chunk(decltype(c)::value); });
    } else {
#pragma GCC unroll 1
      for (int c = 0; c < 8; ++c) chunk(c);
    }
    const __m256 d = halves8(p);
    for (int n = 0; n < N; ++n) {
      const int32_t* pairs = x[n].pairs + 12 * j + 4;  // Σ q per 16 values, as int16 pairs
      __m256i o = _mm256_madd_epi16(scales16(scales), _mm256_set1_epi32(pairs[0]));
      for (int v = 1; v < 8; ++v) {
        o = _mm256_add_epi32(o, _mm256_madd_epi16(scales16(scales + 16 * v), _mm256_set1_epi32(pairs[v])));
      }
      const __m256i s = _mm256_sub_epi32(sum[n], _mm256_slli_epi32(o, 5));  // the offset 32
      acc[n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(x[n].d[8 * j])), acc[n]);
    }
  }
};

// ------------------------------------------------------------ loop

// y[n] = the tile's 8 rows times x[n], n < N.
template <class T, class Dot, int N>
void tile_product(const uint8_t* tile, size_t unit_bytes, int64_t units, const XRow* x, __m256* y) {
  constexpr int A = T::accumulators;
  __m256 acc[N * A];
  for (int i = 0; i < N * A; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t j = 0; j < units; ++j) T::template unit<Dot, N>(tile + static_cast<size_t>(j) * unit_bytes, x, j, acc);
  for (int n = 0; n < N; ++n) y[n] = T::finish(acc + A * n);
}

// Tiles covering weight rows [begin, end) against every x row, Dot::group x
// rows at a time (each tile is read once per group, from L1 after the first).
// Only rows in [begin, end) are written.
template <class T, class Dot>
void tile_loop(const PackedMatrix& w, const Activations& x, float* out, int64_t begin, int64_t end, bool accumulate) {
  // Fewer rows at a time for the types with 9 accumulators per row, so that
  // they stay in registers (measured on Q4_1: 2 rows at a time beat 3, 4 and
  // 8 by 1-15%).
  constexpr int group = T::accumulators > 1 ? std::max(1, Dot::group / 4) : Dot::group;
  static_assert(group >= 1 && group <= 8);
  const size_t unit_bytes = packed_layout(w.type)->unit_bytes;
  const int64_t x_blocks = x.cols / 32;
  XRow rows[8];  // 8: the largest case below, whatever the group
  __m256 acc[8];
  alignas(32) float y[tile_rows];
  for (int64_t t = begin / tile_rows; t * tile_rows < end; ++t) {
    const int64_t r0 = std::max(begin, t * tile_rows), r1 = std::min(end, (t + 1) * tile_rows);
    for (int64_t t0 = 0; t0 < x.rows; t0 += group) {
      const int count = static_cast<int>(std::min<int64_t>(group, x.rows - t0));
      for (int n = 0; n < count; ++n) {
        const int64_t i = t0 + n;
        rows[n] = {x.q.data() + i * x.cols, x.d.data() + i * x_blocks, x.s.data() + i * x_blocks,
                   x.sum32.data() + i * x_blocks, x.pairs.data() + i * (x.cols / 256) * 12};
      }
      const uint8_t* tile = w.tile(t);
      switch (count) {
#define ACTORLM_GROUP_CASE(n) \
  case n: tile_product<T, Dot, n>(tile, unit_bytes, w.units, rows, acc); break;
        ACTORLM_GROUP_CASE(1)
        ACTORLM_GROUP_CASE(2)
        ACTORLM_GROUP_CASE(3)
        ACTORLM_GROUP_CASE(4)
        ACTORLM_GROUP_CASE(5)
        ACTORLM_GROUP_CASE(6)
        ACTORLM_GROUP_CASE(7)
        default: tile_product<T, Dot, 8>(tile, unit_bytes, w.units, rows, acc); break;
#undef ACTORLM_GROUP_CASE
      }
      for (int n = 0; n < count; ++n) {
        _mm256_store_ps(y, acc[n]);
        float* o = out + (t0 + n) * w.rows;
        for (int64_t r = r0; r < r1; ++r) {
          const float v = y[r - t * tile_rows];
          o[r] = accumulate ? o[r] + v : v;
        }
      }
    }
  }
}

// Returns false for a type without an integer kernel.
template <class Dot>
bool integer_matmul(const PackedMatrix& w, const Activations& x, float* out, int64_t begin, int64_t end,
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
