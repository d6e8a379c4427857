// The integer kernels for AVX-512 VNNI (compiled with -mavx512f -mavx512bw
// -mavx512vl -mavx512vnni; chosen at run time): four byte products summed
// into an int32 lane is one vpdpbusd. Tiles go two at a time in 512-bit
// vectors (block_dot_x86.hpp's Z16): on this project's Sapphire Rapids VM a
// 512-bit vpdpbusd issues at the 256-bit rate (2 per cycle, measured with
// 12 independent chains), so 16 rows cost what 8 did. (Zen 4 splits a
// 512-bit operation in two: there the dot products cost what they did and
// only the per-block scale work halves.) An odd last tile goes alone in
// 256-bit vectors, with the same results per row. 32 vector registers hold
// 8 activation rows' accumulators.
#if defined(__x86_64__)
#include "kernels/cpu/block_dot_x86.hpp"
#include "kernels/cpu/quantize_block.hpp"
#include "kernels/cpu/quantized_matmul_isa.hpp"

namespace actorlm::cpu {
namespace {

struct VnniDot {
  static constexpr int group = 8;
  static constexpr bool pin_sums = false;  // block_dot_x86.hpp's pin
  static constexpr bool pairs = true;
  using Pair = Z16;
  // vpdpbusd takes unsigned bytes up to 255, so Q8_0's stored w + 128 goes
  // in as it is and its offset is taken away by the dots' starting value.
  static constexpr bool wide_includes_offset = true;
  static constexpr int terms16(int) { return 1; }  // one instruction per dword already
  static __m256i dot(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
  static __m256i dot_wide(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
  static __m512i dot(__m512i acc, __m512i u, __m512i s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static __m512i dot_wide(__m512i acc, __m512i u, __m512i s) { return _mm512_dpbusd_epi32(acc, u, s); }
};

}  // namespace

bool integer_matmul_avx512_vnni(const PackedMatrix& w, const Activations& x, float* out, int64_t begin, int64_t end,
                                bool accumulate) {
  return integer_matmul<VnniDot>(w, x, out, begin, end, accumulate);
}

int32_t quantize_block_32_avx512(const float* x, bool f16_sum, int8_t* q, float* d, float* s) {
  return quantize_block_32(x, f16_sum, q, d, s);
}

void quantize_block_256_avx512(const float* x, int8_t* q, float* d, float* s, int32_t* sum32, int32_t* pairs) {
  quantize_block_256(x, q, d, s, sum32, pairs);
}

}  // namespace actorlm::cpu

#endif  // __x86_64__
