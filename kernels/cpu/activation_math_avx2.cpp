// activation_math.hpp's kernels for every x86 ISA with AVX2 (compiled with
// -mavx2 -mfma -mf16c whatever the build's own flags; the caller checks the
// CPU first).
#if defined(__x86_64__)
#include "kernels/cpu/activation_math_impl.hpp"

namespace actorlm::cpu::activation_math {

extern const Kernels avx2_kernels;
const Kernels avx2_kernels = kernels;

}  // namespace actorlm::cpu::activation_math

#endif  // __x86_64__
