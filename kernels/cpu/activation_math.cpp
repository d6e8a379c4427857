#include "kernels/cpu/activation_math_impl.hpp"

namespace actorlm::cpu::activation_math {

#if defined(__x86_64__)
extern const Kernels avx2_kernels;  // activation_math_avx2.cpp
#endif

const Kernels& for_isa(Isa isa) {
#if defined(__x86_64__)
  if (isa != Isa::portable) return avx2_kernels;
#else
  static_cast<void>(isa);
#endif
  return kernels;
}

}  // namespace actorlm::cpu::activation_math
