#pragma once
// The element-wise float loops a prefill runs over every activation (the
// softmax's scaling, max and exponentials in attention, SwiGLU), compiled for AVX2 + FMA in
// their own translation unit and picked at run time, so a binary built
// without -march=native (-DACTORLM_NATIVE=OFF, what a package ships) runs
// them as fast as a native build and with the same bits: every x86 ISA path
// takes the AVX2 copy. The portable copy is the same source compiled with
// the build's own flags (for CPUs without AVX2).

#include <cstdint>

#include "kernels/cpu/quantized_matmul.hpp"

namespace actorlm::cpu::activation_math {

struct Kernels {
  // x[j] *= scale for j < n; returns the largest new x[j] (-inf for n = 0),
  // or NaN when any of them is inf or NaN. (Compiled without AVX, this loop
  // alone was 9% of a 512-token prefill, against 3% with it.)
  float (*scale_max)(float* x, int32_t n, float scale);
  // x[j] = exp(x[j] - m) for j < n, where every x[j] <= m and is finite;
  // returns the sum of the new x[j].
  float (*exp_sum)(float* x, int32_t n, float m);
  // out[i] = silu(gate[i]) * up[i] for i < n, each value by the same
  // arithmetic wherever it sits in the arrays.
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n);
};

// The copy for `isa` (AVX2's for every x86 ISA).
const Kernels& for_isa(Isa isa);

}  // namespace actorlm::cpu::activation_math
