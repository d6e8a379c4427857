// The integer kernels for AVX2 without VNNI (compiled with -mavx2 -mfma
// -mf16c only; chosen at run time). Four byte products into an int32 lane
// are vpmaddubsw (unsigned x signed bytes, adjacent pairs summed to int16)
// then vpmaddwd by ones. The int16 pair sums hold for stored values up to 63
// (2 * 63 * 127 < 32,768), and several of them are added in int16 before
// the vpmaddwd where they still fit (terms16); Q8_0's go through |w| and
// sign(q, w) instead.
#if defined(__x86_64__)
#include "kernels/cpu/block_dot_x86.hpp"
#include "kernels/cpu/quantize_block.hpp"
#include "kernels/cpu/quantized_matmul_isa.hpp"

namespace actorlm::cpu {
namespace {

struct Avx2Dot {
  static constexpr int group = 4;  // 16 vector registers
  static constexpr bool pin_sums = true;  // block_dot_x86.hpp's pin
  static constexpr bool pairs = false;  // 256-bit vectors only
  static constexpr bool wide_includes_offset = false;
  static __m256i dot(__m256i acc, __m256i u, __m256i s) { return _mm256_add_epi32(acc, widen16(products16(u, s))); }
  // Pair sums of products: each at most 2 * max_w * 127 in magnitude, so
  // this many of them add up in an int16 lane without overflow.
  static constexpr int terms16(int max_w) {
    const int fit = 32767 / (2 * max_w * 127);
    return fit < 8 ? fit : 8;
  }
  static __m256i products16(__m256i u, __m256i s) { return _mm256_maddubs_epi16(u, s); }
  static __m256i widen16(__m256i p) { return _mm256_madd_epi16(p, _mm256_set1_epi16(1)); }
  // u = w + 128 for signed w: sums w * s (|w| <= 128, |s| <= 127 keep the
  // pairs from saturating).
  static __m256i dot_wide(__m256i acc, __m256i u, __m256i s) {
    const __m256i w = _mm256_xor_si256(u, _mm256_set1_epi8(static_cast<char>(0x80)));
    return dot(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(s, w));
  }
};

}  // namespace

bool integer_matmul_avx2(const PackedMatrix& w, const Activations& x, float* out, int64_t begin, int64_t end,
                         bool accumulate) {
  return integer_matmul<Avx2Dot>(w, x, out, begin, end, accumulate);
}

int32_t quantize_block_32_avx2(const float* x, bool f16_sum, int8_t* q, float* d, float* s) {
  return quantize_block_32(x, f16_sum, q, d, s);
}

void quantize_block_256_avx2(const float* x, int8_t* q, float* d, float* s, int32_t* sum32, int32_t* pairs) {
  quantize_block_256(x, q, d, s, sum32, pairs);
}

}  // namespace actorlm::cpu

#endif  // __x86_64__
