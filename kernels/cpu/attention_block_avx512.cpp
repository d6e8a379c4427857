// attention_block.hpp for AVX-512 (compiled with -mavx512f -mfma -mf16c; the
// caller checks the CPU first): 16 keys per vector for scores (K transposed
// once per block, then every query of a tile broadcasts its dimensions onto
// it), 64 dimensions of 4 queries in registers for the value sums. 32 vector
// registers: a score tile of 4 queries x 32 keys keeps 8 sums, 8 chains and
// 2 key vectors; a value tile 16 sums and 4 value vectors.
#if defined(__x86_64__)
#include "kernels/cpu/attention_block_x86.hpp"

namespace actorlm::cpu::attention_block {
namespace {

// The masked forms with every lane selected: GCC 12's unmasked ones pass an
// "undefined" vector that -Wuninitialized reports.
constexpr __mmask16 all = 0xFFFF;

struct Zmm {
  using F = __m512;
  static constexpr int width = 16;
  static constexpr int score_queries = 4, score_vectors = 2, value_vectors = 4;
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F load(const uint16_t* p) {
    return _mm512_maskz_cvtph_ps(all, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }

  // The usual three rounds of pairwise interleaving (within 128-bit lanes,
  // then of 128-bit lanes).
  static void transpose(F* r) {
    F t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_maskz_unpacklo_ps(all, r[i], r[i + 1]);
      t[i + 1] = _mm512_maskz_unpackhi_ps(all, r[i], r[i + 1]);
    }
    // u[4g + c] holds, in 128-bit lane L, column 4L + c of rows 4g..4g+3.
    for (int g = 0; g < 16; g += 4) {
      u[g] = _mm512_maskz_shuffle_ps(all, t[g], t[g + 2], 0x44);
      u[g + 1] = _mm512_maskz_shuffle_ps(all, t[g], t[g + 2], 0xEE);
      u[g + 2] = _mm512_maskz_shuffle_ps(all, t[g + 1], t[g + 3], 0x44);
      u[g + 3] = _mm512_maskz_shuffle_ps(all, t[g + 1], t[g + 3], 0xEE);
    }
    for (int c = 0; c < 4; ++c) {
      // Lanes 0 and 2 (0x88) or 1 and 3 (0xDD) of each source.
      const F even_lo = _mm512_maskz_shuffle_f32x4(all, u[c], u[4 + c], 0x88);
      const F odd_lo = _mm512_maskz_shuffle_f32x4(all, u[c], u[4 + c], 0xDD);
      const F even_hi = _mm512_maskz_shuffle_f32x4(all, u[8 + c], u[12 + c], 0x88);
      const F odd_hi = _mm512_maskz_shuffle_f32x4(all, u[8 + c], u[12 + c], 0xDD);
      r[c] = _mm512_maskz_shuffle_f32x4(all, even_lo, even_hi, 0x88);
      r[8 + c] = _mm512_maskz_shuffle_f32x4(all, even_lo, even_hi, 0xDD);
      r[4 + c] = _mm512_maskz_shuffle_f32x4(all, odd_lo, odd_hi, 0x88);
      r[12 + c] = _mm512_maskz_shuffle_f32x4(all, odd_lo, odd_hi, 0xDD);
    }
  }
};

}  // namespace

const Kernels avx512 = kernels_for<Zmm>();

}  // namespace actorlm::cpu::attention_block

#endif  // __x86_64__
