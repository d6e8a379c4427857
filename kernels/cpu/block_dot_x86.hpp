#pragma once
// The integer kernels of quantized_matmul.hpp for x86, over matrices packed
// by packed_matrix.hpp (8 rows per tile, one row per 32-bit lane), written
// once over a `Dot` policy (the instructions that differ between AVX2 and
// AVX-512 VNNI) and a lane policy (how many rows one vector holds), and
// included only by the two ISA translation units, each compiled for its ISA.
// Everything here has internal linkage, so the two copies never meet at
// link time.
//
// For one activation row and one 32-value chunk, eight dot instructions
// (dword k of the weights, lane r = row r, against dword k of the
// activation block broadcast to every lane) leave the chunk's exact integer
// sum for 8 rows in 8 lanes; the scales are then applied once per block (or
// K-quant super-block) with the same float operations in the same order for
// every element, whatever the number of activation rows, whatever rows a
// thread gets and whatever the vector width, so results are batch invariant
// and the same on every x86 path. Integer sums are exact:
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
#include <vector>

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
inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m128i load8(const void* p) { return _mm_loadl_epi64(static_cast<const __m128i*>(p)); }

inline int32_t dword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// ------------------------------------------------------------ lanes

// Y8: one tile per 256-bit vector. Loads take the tile's bytes at p; `next`
// (the distance to the following tile's same bytes) is unused.
struct Y8 {
  using I = __m256i;
  using F = __m256;
  static constexpr int rows = 8;
  static I load(const uint8_t* p, size_t) { return load32(p); }
  // 8 bytes (one per row) widened to int32: unsigned.
  static I u8_i32(const uint8_t* p, size_t) { return _mm256_cvtepu8_epi32(load8(p)); }
  // 16 bytes (a pair per row) widened to int16 pairs: unsigned or signed.
  static I u8_i16(const uint8_t* p, size_t) { return _mm256_cvtepu8_epi16(load16(p)); }
  static I s8_i16(const uint8_t* p, size_t) { return _mm256_cvtepi8_epi16(load16(p)); }
  // 8 f16 values (one per row) widened.
  static F halves(const uint8_t* p, size_t) { return _mm256_cvtph_ps(load16(p)); }
  static I zero() { return _mm256_setzero_si256(); }
  static I set32(int32_t v) { return _mm256_set1_epi32(v); }
  static I set8(char v) { return _mm256_set1_epi8(v); }
  static F zerof() { return _mm256_setzero_ps(); }
  static F setf(float v) { return _mm256_set1_ps(v); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  // Each lane's low (high) int16 in both halves of the lane.
  static I dup_low16(I v) { return _mm256_blend_epi16(v, _mm256_slli_epi32(v, 16), 0xAA); }
  static I dup_high16(I v) { return _mm256_blend_epi16(_mm256_srli_epi32(v, 16), v, 0xAA); }
};

inline __m256i and_(__m256i a, __m256i b) { return _mm256_and_si256(a, b); }
inline __m256i or_(__m256i a, __m256i b) { return _mm256_or_si256(a, b); }
inline __m256i add16(__m256i a, __m256i b) { return _mm256_add_epi16(a, b); }
inline __m256i add32(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }
inline __m256i sub32(__m256i a, __m256i b) { return _mm256_sub_epi32(a, b); }
inline __m256i mul32(__m256i a, __m256i b) { return _mm256_mullo_epi32(a, b); }
inline __m256i madd16(__m256i a, __m256i b) { return _mm256_madd_epi16(a, b); }
template <int S> inline __m256i shl16(__m256i a) { return _mm256_slli_epi16(a, S); }
template <int S> inline __m256i shr16(__m256i a) { return _mm256_srli_epi16(a, S); }
template <int S> inline __m256i shl32(__m256i a) { return _mm256_slli_epi32(a, S); }
template <int S> inline __m256i sar32(__m256i a) { return _mm256_srai_epi32(a, S); }
inline __m256 to_float(__m256i a) { return _mm256_cvtepi32_ps(a); }
inline __m256 mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
inline __m256 addf(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
inline __m256 fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
inline __m256 fnma(__m256 a, __m256 b, __m256 c) { return _mm256_fnmadd_ps(a, b, c); }

#if defined(__AVX512F__) && defined(__AVX512BW__)
// Z16: two adjacent tiles side by side in 512-bit vectors, tile t in lanes
// 0-7 and tile t + 1 in lanes 8-15. Every load takes the same bytes of both
// tiles, `next` bytes apart, so one packed layout serves both widths and the
// two halves compute exactly what Y8 computes for each tile. On the cores
// this runs on, a 512-bit vpdpbusd issues as often as a 256-bit one, so the
// dot products go twice as fast, and every broadcast of an activation dword
// and every scale operation serves 16 rows instead of 8.
struct Z16 {
  using I = __m512i;
  using F = __m512;
  static constexpr int rows = 16;
  static constexpr __mmask16 all = 0xFFFF;  // GCC 12 warns on the unmasked widening forms
  static I pair(__m256i lo, __m256i hi) { return _mm512_maskz_inserti64x4(0xFF, _mm512_castsi256_si512(lo), hi, 1); }
  static I load(const uint8_t* p, size_t next) { return pair(load32(p), load32(p + next)); }
  static I u8_i32(const uint8_t* p, size_t next) {
    return _mm512_maskz_cvtepu8_epi32(all, _mm_unpacklo_epi64(load8(p), load8(p + next)));
  }
  static I u8_i16(const uint8_t* p, size_t next) {
    return _mm512_maskz_cvtepu8_epi16(~__mmask32{0}, _mm256_set_m128i(load16(p + next), load16(p)));
  }
  static I s8_i16(const uint8_t* p, size_t next) {
    return _mm512_maskz_cvtepi8_epi16(~__mmask32{0}, _mm256_set_m128i(load16(p + next), load16(p)));
  }
  static F halves(const uint8_t* p, size_t next) {
    return _mm512_maskz_cvtph_ps(all, _mm256_set_m128i(load16(p + next), load16(p)));
  }
  static I zero() { return _mm512_setzero_si512(); }
  static I set32(int32_t v) { return _mm512_set1_epi32(v); }
  static I set8(char v) { return _mm512_set1_epi8(v); }
  static F zerof() { return _mm512_setzero_ps(); }
  static F setf(float v) { return _mm512_set1_ps(v); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
};

inline __m512i and_(__m512i a, __m512i b) { return _mm512_and_si512(a, b); }
inline __m512i or_(__m512i a, __m512i b) { return _mm512_or_si512(a, b); }
inline __m512i add16(__m512i a, __m512i b) { return _mm512_add_epi16(a, b); }
inline __m512i add32(__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }
inline __m512i sub32(__m512i a, __m512i b) { return _mm512_sub_epi32(a, b); }
inline __m512i mul32(__m512i a, __m512i b) { return _mm512_mullo_epi32(a, b); }
inline __m512i madd16(__m512i a, __m512i b) { return _mm512_madd_epi16(a, b); }
template <int S> inline __m512i shl16(__m512i a) { return _mm512_slli_epi16(a, S); }
template <int S> inline __m512i shr16(__m512i a) { return _mm512_srli_epi16(a, S); }
template <int S> inline __m512i shl32(__m512i a) { return _mm512_maskz_slli_epi32(Z16::all, a, S); }
template <int S> inline __m512i sar32(__m512i a) { return _mm512_maskz_srai_epi32(Z16::all, a, S); }
inline __m512 to_float(__m512i a) { return _mm512_maskz_cvtepi32_ps(Z16::all, a); }
inline __m512 mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
inline __m512 addf(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
inline __m512 fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
inline __m512 fnma(__m512 a, __m512 b, __m512 c) { return _mm512_fnmadd_ps(a, b, c); }
#endif

// Bits 0-3 of dword K of a chunk, from its four nibble vectors.
template <class L, int K>
inline typename L::I low4(const uint8_t* nibbles, size_t next) {
  const auto n = L::load(nibbles + 32 * (K % 4), next);
  if constexpr (K < 4) return and_(n, L::set8(15));
  return and_(shr16<4>(n), L::set8(15));
}

// Bit 4 of dword K, from a 5th-bit vector (bit K of each byte). The 16-bit
// shifts never move a bit across a byte into the kept position.
template <class L, int K>
inline typename L::I bit4(const uint8_t* bits, size_t next) {
  const auto b = L::load(bits, next);
  if constexpr (K < 4) return and_(shl16<4 - K>(b), L::set8(0x10));
  return and_(shr16<K - 4>(b), L::set8(0x10));
}

// Bits 4-5 of dword K, from Q6_K's two 2-bit vectors (bits 2(K % 4) and up).
template <class L, int K>
inline typename L::I bits45(const uint8_t* high, size_t next) {
  const auto h = L::load(high + 32 * (K / 4), next);
  constexpr int at = 2 * (K % 4);
  if constexpr (at < 4) return and_(shl16<4 - at>(h), L::set8(0x30));
  return and_(shr16<at - 4>(h), L::set8(0x30));
}

// Sub-block scale 2p (Odd = false) or 2p + 1 of each lane, from a vector of
// int16 pairs, sign-extended to int32.
template <bool Odd, class I>
inline I pair_half(I v) {
  if constexpr (Odd) return sar32<16>(v);
  return sar32<16>(shl32<16>(v));
}

// One quantized activation row (quantized_matmul.hpp's Activations).
struct XRow {
  const int8_t* q;
  const float* d;
  const float* s;
  const int32_t* pairs;
  const int32_t* start;  // per block: -offset * Σ q (the offset types' dots start there)
};

// Where Dot::pin_sums, an empty asm that "changes" v: the sum so far stays
// one register. Integer adds reassociate, and with AVX2's separate multiply
// and add GCC turned a row's chain of eight dot products into a tree,
// computing all eight first and spilling them to the stack (Q8_0's 4-row
// loop made more stack accesses than multiplies; pinned, its prefill went
// from ~330 to ~410 t/s). vpdpbusd accumulates in place and needs no pin
// (pinned, the VNNI kernels lost 15-20%).
template <class Dot, class V>
ACTORLM_HOT void pin(V& v) {
  if constexpr (Dot::pin_sums) asm("" : "+v"(v));
}

// dot[n] += dwords [K0, K1) of the chunk at value `at` (weights from
// weight(k), stored values at most MaxW) against x[n]. Wide: stored values
// up to 255 (Q8_0).
// Where the Dot policy multiplies bytes into int16 pairs first (AVX2's
// vpmaddubsw), Dot::terms16(MaxW) of those pair sums are added in int16
// before one widening to int32 (they cannot overflow: |pair| <= 2 * MaxW *
// 127), which takes a third of the multiply-port work away for 4-bit
// weights. Otherwise, with fewer than 4 rows, odd dwords go to a second
// accumulator (added at the end) for two independent dependency chains.
// Integer sums either way: every grouping gives the same result.
// `widen(part, k)` turns an int16 pair sum ending at dword k into int32
// lanes; nullptr: Dot::widen16 (a vpmaddwd by ones). The K-quants pass
// their sub-block scales instead (see scaled16): multiplied in for free.
template <class L, class Dot, bool Wide, int N, int K0, int K1, int MaxW, class W, class Widen>
ACTORLM_HOT void chunk_dots(W&& weight, const XRow* x, int64_t at, typename L::I* dot, Widen&& widen) {
  constexpr int terms = Wide ? 1 : Dot::terms16(MaxW);
  if constexpr (terms > 1) {
    typename L::I part[N];
    unroll<K1 - K0>([&](auto i) __attribute__((always_inline)) {
      constexpr int k = K0 + decltype(i)::value;
      constexpr int pos = decltype(i)::value % terms;
      const auto w = weight(std::integral_constant<int, k>{});
      unroll<N>([&](auto m) __attribute__((always_inline)) {
        constexpr int n = decltype(m)::value;
        const auto prod = Dot::products16(w, L::set32(dword(x[n].q + at + 4 * k)));
        part[n] = pos == 0 ? prod : add16(part[n], prod);
        pin<Dot>(part[n]);
        if (pos == terms - 1 || k == K1 - 1) {
          if constexpr (std::is_same_v<std::decay_t<Widen>, std::nullptr_t>) {
            dot[n] = add32(dot[n], Dot::widen16(part[n]));
          } else {
            dot[n] = add32(dot[n], widen(part[n], std::integral_constant<int, k>{}));
          }
          pin<Dot>(dot[n]);
        }
      });
    });
    return;
  }
  constexpr bool split = N < 4;
  typename L::I odd[N];
  if constexpr (split) {
    for (int n = 0; n < N; ++n) odd[n] = L::zero();
  }
  unroll<K1 - K0>([&](auto i) __attribute__((always_inline)) {
    constexpr int k = K0 + decltype(i)::value;
    const auto w = weight(std::integral_constant<int, k>{});
    for (int n = 0; n < N; ++n) {
      const auto q = L::set32(dword(x[n].q + at + 4 * k));
      auto& a = (split && k % 2 == 1) ? odd[n] : dot[n];
      a = Wide ? Dot::dot_wide(a, w, q) : Dot::dot(a, w, q);
      pin<Dot>(a);
    }
  });
  if constexpr (split) {
    for (int n = 0; n < N; ++n) dot[n] = add32(dot[n], odd[n]);
  }
}

template <class L, class Dot, bool Wide, int N, int K0, int K1, int MaxW, class W>
ACTORLM_HOT void chunk_dots(W&& weight, const XRow* x, int64_t at, typename L::I* dot) {
  chunk_dots<L, Dot, Wide, N, K0, K1, MaxW>(weight, x, at, dot, nullptr);
}

// Where the Dot policy sums int16 pairs before widening (AVX2), a K-quant
// sub-block's scale goes into that widening: a vpmaddwd of the pair sums
// against the scale in both int16 halves of each lane gives scale * sum in
// one instruction, where widening by ones and then a vpmulld (two uops,
// latency 10) per chunk and activation row cost three. The pair sums and
// the scales (|sc| <= 128) keep every product inside int32, so the sums
// are the same integers.
template <class Dot, int MaxW>
constexpr bool scaled16 = Dot::terms16(MaxW) > 1;

// f(n) for each activation row n < N: with n a compile-time constant where
// Unrolled (the scaled16 kernels, so that GCC keeps their per-row sums in
// registers: it only does so for arrays indexed by constants; with a loop,
// Q4_K's chunk loop loaded and stored its four sums and the scales on the
// stack every chunk, now it touches the stack not at all), else a plain
// loop (the VNNI kernels' code stays as it was).
template <int N, bool Unrolled, class F>
ACTORLM_HOT void each_row(F&& f) {
  if constexpr (Unrolled) {
    unroll<N>(f);
  } else {
    for (int n = 0; n < N; ++n) f(n);
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
  // What the integer sum takes away (offset * Σ q). AVX2's wide dot
  // multiplies the signed values and has no offset to remove.
  template <class Dot>
  static constexpr int offset = (wide && !Dot::wide_includes_offset) ? 0 : Offset;

  template <class F>
  static F finish(const F* a) {
    if constexpr (!Min) {
      return a[0];
    } else {
      const F even = addf(addf(a[0], a[4]), addf(a[2], a[6]));
      const F odd = addf(addf(a[1], a[5]), addf(a[3], a[7]));
      return addf(addf(even, odd), a[8]);
    }
  }

  template <class L, class Dot, int N>
  ACTORLM_HOT static void unit(const uint8_t* p, size_t next, const XRow* x, int64_t j, typename L::F* acc) {
    using I = typename L::I;
    using F = typename L::F;
    const F d = L::halves(p, next);
    const uint8_t* body = p + (Min ? 32 : 16);
    auto weight = [&](auto k) __attribute__((always_inline)) -> I {
      constexpr int K = decltype(k)::value;
      if constexpr (Bits == 8) {
        return L::load(body + 32 * K, next);
      } else if constexpr (Bits == 5) {
        return or_(low4<L, K>(body, next), bit4<L, K>(body + 128, next));
      } else {
        return low4<L, K>(body, next);
      }
    };
    if constexpr (Min) {
      const F m = L::halves(p + 16, next);
      F dd[N];
      for (int n = 0; n < N; ++n) dd[n] = mul(d, L::setf(x[n].d[j]));
      unroll<8>([&](auto k) __attribute__((always_inline)) {
        constexpr int K = decltype(k)::value;
        const I w = weight(k);
        for (int n = 0; n < N; ++n) {
          const I part = Dot::dot(L::zero(), w, L::set32(dword(x[n].q + 32 * j + 4 * K)));
          acc[9 * n + K] = fma(dd[n], to_float(part), acc[9 * n + K]);
        }
      });
      for (int n = 0; n < N; ++n) acc[9 * n + 8] = fma(m, L::setf(x[n].s[j]), acc[9 * n + 8]);
    } else {
      // The dots start from -offset * Σ q, precomputed per block: a
      // broadcast from memory, where subtracting it afterwards cost three
      // vector operations per block and activation row.
      I dot[N];
      for (int n = 0; n < N; ++n) dot[n] = offset<Dot> != 0 ? L::set32(x[n].start[j]) : L::zero();
      chunk_dots<L, Dot, wide, N, 0, 8, (1 << Bits) - 1>(weight, x, 32 * j, dot);
      for (int n = 0; n < N; ++n) acc[n] = fma(to_float(dot[n]), mul(d, L::setf(x[n].d[j])), acc[n]);
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
  template <class Dot>
  static constexpr int offset = 0;  // the mins go through the q8_K pair sums
  template <class F>
  static F finish(const F* a) {
    return a[0];
  }

  template <class L, class Dot, int N>
  ACTORLM_HOT static void unit(const uint8_t* p, size_t next, const XRow* x, int64_t j, typename L::F* acc) {
    using I = typename L::I;
    using F = typename L::F;
    const uint8_t* scales = p + 32;  // per chunk: 8 rows' scales
    const uint8_t* mins = scales + 64;  // per chunk pair: 8 rows' two mins
    const uint8_t* body = mins + 64;
    const uint8_t* high = body + 8 * 128;
    constexpr int max_w = (1 << Bits) - 1;
    I sum[N];
    each_row<N, scaled16<Dot, max_w>>([&](auto n) __attribute__((always_inline)) { sum[n] = L::zero(); });
    auto chunk = [&](int c) __attribute__((always_inline)) {
      const I sc = L::u8_i32(scales + 8 * c, next);
      auto weight = [&](auto k) __attribute__((always_inline)) -> I {
        constexpr int K = decltype(k)::value;
        if constexpr (Bits == 5) return or_(low4<L, K>(body + 128 * c, next), bit4<L, K>(high + 32 * c, next));
        return low4<L, K>(body + 128 * c, next);
      };
      if constexpr (scaled16<Dot, max_w>) {
        const I sc16 = L::dup_low16(sc);
        chunk_dots<L, Dot, false, N, 0, 8, max_w>(weight, x, 256 * j + 32 * c, sum,
                                                  [&](I part, auto) __attribute__((always_inline)) {
                                                    return madd16(part, sc16);
                                                  });
      } else {
        I dot[N];
        for (int n = 0; n < N; ++n) dot[n] = L::zero();
        chunk_dots<L, Dot, false, N, 0, 8, max_w>(weight, x, 256 * j + 32 * c, dot);
        for (int n = 0; n < N; ++n) sum[n] = add32(sum[n], mul32(dot[n], sc));
      }
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
    const F d = L::halves(p, next), dmin = L::halves(p + 16, next);
    each_row<N, scaled16<Dot, max_w>>([&](auto n) __attribute__((always_inline)) {
      const int32_t* pairs = x[n].pairs + 12 * j;  // Σ q per 32 values, as int16 pairs
      I m = madd16(L::u8_i16(mins, next), L::set32(pairs[0]));
      for (int v = 1; v < 4; ++v) m = add32(m, madd16(L::u8_i16(mins + 16 * v, next), L::set32(pairs[v])));
      const F dx = L::setf(x[n].d[8 * j]);
      acc[n] = fma(to_float(sum[n]), mul(d, dx), acc[n]);
      acc[n] = fnma(to_float(m), mul(dmin, dx), acc[n]);
    });
  }
};

using Q4_K = KQuant<4>;
using Q5_K = KQuant<5>;

// Q6_K super-blocks: d[8], 128 bytes of scales (16 sub-blocks of 16), 8
// chunks of nibble vectors, 8 pairs of 2-bit vectors.
struct Q6_K {
  static constexpr int accumulators = 1;
  template <class Dot>
  static constexpr int offset = 0;  // its 32 goes through the q8_K pair sums
  template <class F>
  static F finish(const F* a) {
    return a[0];
  }

  template <class L, class Dot, int N>
  ACTORLM_HOT static void unit(const uint8_t* p, size_t next, const XRow* x, int64_t j, typename L::F* acc) {
    using I = typename L::I;
    using F = typename L::F;
    const uint8_t* scales = p + 16;  // per chunk: 8 rows' two int8 scales
    const uint8_t* body = scales + 128;
    const uint8_t* high = body + 8 * 128;
    I sum[N];
    each_row<N, scaled16<Dot, 63>>([&](auto n) __attribute__((always_inline)) { sum[n] = L::zero(); });
    auto chunk = [&](int c) __attribute__((always_inline)) {
      auto weight = [&](auto k) __attribute__((always_inline)) -> I {
        constexpr int K = decltype(k)::value;
        return or_(low4<L, K>(body + 128 * c, next), bits45<L, K>(high + 64 * c, next));
      };
      if constexpr (scaled16<Dot, 63>) {
        const I v = L::s8_i16(scales + 16 * c, next);  // int16 pairs: the chunk's two scales
        const I sc0_16 = L::dup_low16(v), sc1_16 = L::dup_high16(v);
        chunk_dots<L, Dot, false, N, 0, 8, 63>(weight, x, 256 * j + 32 * c, sum,
                                               [&](I part, auto k) __attribute__((always_inline)) {
                                                 return madd16(part, decltype(k)::value < 4 ? sc0_16 : sc1_16);
                                               });
      } else {
        I first[N], second[N];  // the chunk's two 16-value sub-blocks
        for (int n = 0; n < N; ++n) first[n] = second[n] = L::zero();
        chunk_dots<L, Dot, false, N, 0, 4, 63>(weight, x, 256 * j + 32 * c, first);
        chunk_dots<L, Dot, false, N, 4, 8, 63>(weight, x, 256 * j + 32 * c, second);
        const I v = L::s8_i16(scales + 16 * c, next);
        const I sc0 = pair_half<false>(v), sc1 = pair_half<true>(v);
        for (int n = 0; n < N; ++n) sum[n] = add32(sum[n], add32(mul32(first[n], sc0), mul32(second[n], sc1)));
      }
    };
    if constexpr (N <= 2) {  // as in KQuant
      unroll<8>([&](auto c) __attribute__((always_inline)) { chunk(decltype(c)::value); });
    } else {
#pragma GCC unroll 1
      for (int c = 0; c < 8; ++c) chunk(c);
    }
    const F d = L::halves(p, next);
    each_row<N, scaled16<Dot, 63>>([&](auto n) __attribute__((always_inline)) {
      const int32_t* pairs = x[n].pairs + 12 * j + 4;  // Σ q per 16 values, as int16 pairs
      I o = madd16(L::s8_i16(scales, next), L::set32(pairs[0]));
      for (int v = 1; v < 8; ++v) o = add32(o, madd16(L::s8_i16(scales + 16 * v, next), L::set32(pairs[v])));
      const I s = sub32(sum[n], shl32<5>(o));  // the offset 32
      acc[n] = fma(to_float(s), mul(d, L::setf(x[n].d[8 * j])), acc[n]);
    });
  }
};

// ------------------------------------------------------------ loop

// y[n] = the tile's rows (L::rows: one tile, or two adjacent ones) times
// x[n], n < N.
//
// With Fetch (the first group of x rows over these tiles), each unit asks
// for the one two units ahead, every cache line of it (a prefetch never
// faults, so past the matrix's end is harmless). With few activation rows
// the product is bound by memory, and the hardware prefetchers alone left it
// short: a 1B Q4_K_M decoding one sequence on a Zen 5 VM went from ~50 to
// ~60 t/s, every round (39 GB/s of its 46 for a plain 2-thread read,
// before), 8 sequences from ~165 to ~225. Distances of 1 to 8 units measured
// the same within that VM's noise. Later groups find the tile in L1, and
// prefetching there cost the 135M model's 8-sequence decode 8%.
template <class T, class L, class Dot, int N, bool Fetch>
void tile_product(const uint8_t* tile, size_t next, size_t unit_bytes, int64_t units, const XRow* x,
                  typename L::F* y) {
  constexpr int A = T::accumulators;
  constexpr int64_t ahead = 2;
  typename L::F acc[N * A];
  for (int i = 0; i < N * A; ++i) acc[i] = L::zerof();
  for (int64_t j = 0; j < units; ++j) {
    if constexpr (Fetch) {
      // As an integer: the address may lie past the matrix, where forming
      // a pointer would be undefined.
      const uintptr_t later = reinterpret_cast<uintptr_t>(tile) + static_cast<size_t>(j + ahead) * unit_bytes;
      for (int k = 0; k < L::rows / 8; ++k) {  // each tile of a pair
        for (size_t b = 0; b < unit_bytes; b += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(later + k * next + b), _MM_HINT_T0);
        }
      }
    }
    T::template unit<L, Dot, N>(tile + static_cast<size_t>(j) * unit_bytes, next, x, j, acc);
  }
  for (int n = 0; n < N; ++n) y[n] = T::finish(acc + A * n);
}

// Tiles [t, t + L::rows / 8) against every x row, Dot::group x rows at a time
// (each tile is read once per group, from L1 after the first). Only rows in
// [begin, end) are written.
template <class T, class L, class Dot>
void tiles_times_x(const PackedMatrix& w, const Activations& x, const int32_t* start, float* out, int64_t t,
                   int64_t begin, int64_t end, bool accumulate) {
  // Fewer rows at a time for the types with 9 accumulators per row, so that
  // they stay in registers (measured on Q4_1: 2 rows at a time beat 3, 4 and
  // 8 by 1-15%).
  constexpr int group = T::accumulators > 1 ? std::max(1, Dot::group / 4) : Dot::group;
  static_assert(group >= 1 && group <= 8);
  const size_t unit_bytes = packed_layout(w.type)->unit_bytes;
  const int64_t x_blocks = x.cols / 32;
  const int64_t first = t * tile_rows;
  const int64_t r0 = std::max(begin, first), r1 = std::min(end, first + L::rows);
  XRow rows[8];  // 8: the largest case below, whatever the group
  typename L::F acc[8];
  alignas(64) float y[L::rows];
  for (int64_t t0 = 0; t0 < x.rows; t0 += group) {
    const int count = static_cast<int>(std::min<int64_t>(group, x.rows - t0));
    for (int n = 0; n < count; ++n) {
      const int64_t i = t0 + n;
      rows[n] = {x.q.data() + i * x.cols, x.d.data() + i * x_blocks, x.s.data() + i * x_blocks,
                 x.pairs.data() + i * (x.cols / 256) * 12, start != nullptr ? start + i * x_blocks : nullptr};
    }
    const uint8_t* tile = w.tile(t);
    // A compile-time flag, so the hot loop has no test in it (a run-time
    // one read the 135M model's prefill 3-4% lower in two rounds, within
    // this VM's noise but never above).
    auto product = [&](auto n) __attribute__((always_inline)) {
      constexpr int N = decltype(n)::value;
      if (t0 == 0) {
        tile_product<T, L, Dot, N, true>(tile, w.tile_bytes, unit_bytes, w.units, rows, acc);
      } else {
        tile_product<T, L, Dot, N, false>(tile, w.tile_bytes, unit_bytes, w.units, rows, acc);
      }
    };
    switch (count) {
#define ACTORLM_GROUP_CASE(n) \
  case n: product(std::integral_constant<int, n>{}); break;
      ACTORLM_GROUP_CASE(1)
      ACTORLM_GROUP_CASE(2)
      ACTORLM_GROUP_CASE(3)
      ACTORLM_GROUP_CASE(4)
      ACTORLM_GROUP_CASE(5)
      ACTORLM_GROUP_CASE(6)
      ACTORLM_GROUP_CASE(7)
      default: product(std::integral_constant<int, 8>{}); break;
#undef ACTORLM_GROUP_CASE
    }
    for (int n = 0; n < count; ++n) {
      L::store(y, acc[n]);
      float* o = out + (t0 + n) * w.rows;
      for (int64_t r = r0; r < r1; ++r) {
        const float v = y[r - first];
        o[r] = accumulate ? o[r] + v : v;
      }
    }
  }
}

// The tiles covering weight rows [begin, end): two at a time where the Dot
// policy has 512-bit vectors, a next tile exists and there are two
// activation rows or more, else one. A pair's weights are two 256-bit loads
// joined in one register (a shuffle-port insert per load); with a single
// activation row (one sequence decoding) nothing amortizes that, and on a
// Zen 5 core the pairs ran single-sequence decode 6-18% slower than one
// tile at a time (same bits either way: the lanes hold the same sums).
template <class T, class Dot>
void tile_loop(const PackedMatrix& w, const Activations& x, float* out, int64_t begin, int64_t end, bool accumulate) {
  // -offset * Σ q per x block, for the types with an offset (a few hundred
  // integers against the product's x rows * weight rows * blocks).
  thread_local std::vector<int32_t> starts;
  constexpr int offset = T::template offset<Dot>;
  const int32_t* start = nullptr;  // read only by the types with an offset
  if constexpr (offset != 0) {
    starts.resize(x.sum32.size());
    std::transform(x.sum32.begin(), x.sum32.end(), starts.begin(), [](int32_t s) { return -offset * s; });
    start = starts.data();
  }
  int64_t t = begin / tile_rows;
  if constexpr (Dot::pairs) {
    for (; x.rows > 1 && (t + 1) * tile_rows < end && t + 1 < w.tiles(); t += 2) {
      tiles_times_x<T, typename Dot::Pair, Dot>(w, x, start, out, t, begin, end, accumulate);
    }
  }
  for (; t * tile_rows < end; ++t) tiles_times_x<T, Y8, Dot>(w, x, start, out, t, begin, end, accumulate);
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
