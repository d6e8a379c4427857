// attention_block.hpp for AVX2 (compiled with -mavx2 -mfma -mf16c and no
// AVX-512; the caller checks the CPU first): 8 keys per vector. With 16
// vector registers a score tile is 3 queries x 16 keys (6 sums, 6 chains, 2
// key vectors and a broadcast query value) and a value tile 4 queries x 16
// dimensions (8 sums, 2 value vectors).
#if defined(__x86_64__)
#include "kernels/cpu/attention_block_x86.hpp"

namespace actorlm::cpu::attention_block {
namespace {

struct Ymm {
  using F = __m256;
  static constexpr int width = 8;
  static constexpr int score_queries = 3, score_vectors = 2, value_vectors = 2;
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }

  // Pairs interleaved, then quads within 128-bit lanes, then the lanes.
  static void transpose(F* r) {
    F a[8], b[8];
    for (int i = 0; i < 8; i += 2) {
      a[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      a[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      b[i] = _mm256_shuffle_ps(a[i], a[i + 2], 0x44);
      b[i + 1] = _mm256_shuffle_ps(a[i], a[i + 2], 0xEE);
      b[i + 2] = _mm256_shuffle_ps(a[i + 1], a[i + 3], 0x44);
      b[i + 3] = _mm256_shuffle_ps(a[i + 1], a[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; ++i) {
      r[i] = _mm256_permute2f128_ps(b[i], b[i + 4], 0x20);
      r[i + 4] = _mm256_permute2f128_ps(b[i], b[i + 4], 0x31);
    }
  }
};

}  // namespace

const Kernels avx2 = kernels_for<Ymm>();

}  // namespace actorlm::cpu::attention_block

#endif  // __x86_64__
