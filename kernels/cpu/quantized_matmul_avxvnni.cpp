// The integer kernels for AVX-VNNI (the VEX-encoded vpdpbusd of Alder Lake
// and later Intel cores and of Zen 5, on 256-bit vectors; compiled with
// -mavx2 -mfma -mf16c -mavxvnni and no AVX-512; chosen at run time): four
// byte products summed into an int32 lane is one instruction, as with
// AVX-512 VNNI, but with AVX2's 16 vector registers and 8-row tiles.
#if defined(__x86_64__)
#include "kernels/cpu/block_dot_x86.hpp"
#include "kernels/cpu/quantized_matmul_isa.hpp"

namespace actorlm::cpu {
namespace {

struct AvxVnniDot {
  static constexpr int group = 4;  // 16 vector registers
  static constexpr bool pin_sums = false;  // block_dot_x86.hpp's pin
  static constexpr bool pairs = false;
  // vpdpbusd takes unsigned bytes up to 255: Q8_0's stored w + 128 goes in
  // as it is and its offset is taken away by the dots' starting value.
  static constexpr bool wide_includes_offset = true;
  static constexpr int terms16(int) { return 1; }
  static __m256i dot(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
  static __m256i dot_wide(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
};

}  // namespace

bool integer_matmul_avx_vnni(const PackedMatrix& w, const Activations& x, float* out, int64_t begin, int64_t end,
                             bool accumulate) {
  return integer_matmul<AvxVnniDot>(w, x, out, begin, end, accumulate);
}

}  // namespace actorlm::cpu

#endif  // __x86_64__
