// The integer kernels for AVX2 without VNNI (compiled with -mavx2 -mfma
// -mf16c only; chosen at run time). A 32-byte dot product is vpmaddubsw
// (unsigned x signed bytes, adjacent pairs summed to int16) then vpmaddwd by
// ones (pairs of those to int32).
#if defined(__x86_64__)
#include "kernels/cpu/block_dot_x86.hpp"
#include "kernels/cpu/quantized_matmul_isa.hpp"

namespace actorlm::cpu {
namespace {

struct Avx2Dot {
  static __m256i unsigned_signed(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
};

}  // namespace

bool integer_matmul_avx2(const MatrixView& w, const Activations& x, float* out, int64_t begin, int64_t end,
                         bool accumulate) {
  return integer_matmul<Avx2Dot>(w, x, out, begin, end, accumulate);
}

}  // namespace actorlm::cpu

#endif  // __x86_64__
