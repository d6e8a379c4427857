// The integer kernels for AVX-512 VNNI (compiled with -mavx512f -mavx512bw
// -mavx512vl -mavx512vnni; chosen at run time): a 32-byte dot product is one
// vpdpbusd on 256-bit vectors, which on the cores we run (Zen 4, Ice Lake
// and later) issues as fast as the 512-bit form without its clock penalty.
#if defined(__x86_64__)
#include "kernels/cpu/block_dot_x86.hpp"
#include "kernels/cpu/quantized_matmul_isa.hpp"

namespace actorlm::cpu {
namespace {

struct VnniDot {
  static __m256i unsigned_signed(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
};

}  // namespace

bool integer_matmul_avx512_vnni(const MatrixView& w, const Activations& x, float* out, int64_t begin, int64_t end,
                                bool accumulate) {
  return integer_matmul<VnniDot>(w, x, out, begin, end, accumulate);
}

}  // namespace actorlm::cpu

#endif  // __x86_64__
