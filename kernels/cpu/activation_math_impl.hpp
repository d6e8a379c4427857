#pragma once
// The bodies of activation_math.hpp's kernels, included by its translation
// units (activation_math.cpp: the build's flags; activation_math_avx2.cpp:
// AVX2 + FMA + F16C).
// Internal linkage: the copies never meet at link time.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/activation_math.hpp"
#include "kernels/cpu/exp_nonpositive.hpp"

namespace actorlm::cpu::activation_math {
namespace {

float scale_max(float* x, int32_t n, float scale) {
  // The max is exact in any order, so 8 lanes keep their own; `probe`
  // becomes NaN if any value is inf or NaN (x * 0 is then NaN) and stays a
  // zero otherwise. (A scalar loop with a per-value isfinite test was half
  // of this step's time: one dependent compare per value.)
  using f8 = exp_f8;
  f8 max8 = f8{} - INFINITY, probe8{};
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    f8 v;
    std::memcpy(&v, x + j, sizeof v);
    v *= scale;
    std::memcpy(x + j, &v, sizeof v);
    max8 = v > max8 ? v : max8;
    probe8 += v * 0.0f;
  }
  float max = -INFINITY, probe = 0.0f;
  for (int l = 0; l < 8; ++l) {
    max = std::max(max, max8[l]);
    probe += probe8[l];
  }
  for (; j < n; ++j) {
    x[j] *= scale;
    max = std::max(max, x[j]);
    probe += x[j] * 0.0f;
  }
  return probe == 0.0f ? max : NAN;
}

// The sum in one fixed order, whatever the vector width: 8 running lanes
// over the whole groups of 8, added pairwise, then the rest in order (padded
// to 8 lanes, so each value's exp is the same wherever it sits).
float exp_sum(float* x, int32_t n, float m) {
  using f8 = exp_f8;
  f8 lanes{};
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    f8 v;
    std::memcpy(&v, x + j, sizeof v);
    v = exp_nonpositive8(v - m);
    std::memcpy(x + j, &v, sizeof v);
    lanes += v;
  }
  float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  if (j < n) {
    f8 v = f8{} + m;  // the padding lanes give exp(0), not added
    const auto rest = static_cast<size_t>(n - j);
    std::memcpy(&v, x + j, rest * sizeof(float));
    v = exp_nonpositive8(v - m);
    std::memcpy(x + j, &v, rest * sizeof(float));
    for (size_t l = 0; l < rest; ++l) sum += v[l];
  }
  return sum;
}

// 8 floats, and 8 doubles, as GCC's generic vectors: AVX registers where the
// translation unit has them, narrower ones otherwise, the same arithmetic in
// each.
using v8f = float __attribute__((vector_size(32)));
using v8d = double __attribute__((vector_size(64)));
using v8l = int64_t __attribute__((vector_size(64)));

// expf of 8 values, evaluated in double and rounded once to float, so that
// it is the correctly rounded exp(x) libm's expf also returns: on a sweep of
// every second float in [-87, 88.7] the two differ by an ulp on 0.008% of
// inputs (those inspected sat a hair from a rounding midpoint). (A float
// polynomial of 1 ulp moved 10% of values by an ulp, and that alone moved
// teacher-forced agreement with llama.cpp from 98.08% to 97.63%.) x = n ln2
// + r with |r| <= ln2 / 2; exp(r) by its Taylor series to r^11 (relative
// error under 1e-14); 2^n written into the exponent bits. x is clamped to
// [-104, 89], beyond which the float result is 0 or inf anyway; NaN compares
// false and stays NaN. libm's expf, one value per call, was the largest
// serial cost of SwiGLU.
inline v8f expf8(v8f xf) {
  // Clamped while still float (the bounds are floats, the widening exact):
  // a select on 8 doubles became scalar code without AVX-512.
  xf = xf < -104.0f ? v8f{} - 104.0f : xf;
  xf = xf > 89.0f ? v8f{} + 89.0f : xf;
  const v8d x = __builtin_convertvector(xf, v8d);
  constexpr double round_magic = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  const v8d t = x * 1.4426950408889634 + round_magic;
  const v8d n = t - round_magic;
  // ln 2 in two parts, the first short enough that n times it is exact.
  const v8d r = (x - n * 0.6931471803691238) - n * 1.9082149292705877e-10;
  v8d p = r * (1.0 / 39916800) + 1.0 / 3628800;
  for (double c : {1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0}) {
    p = p * r + c;
  }
  // n as an integer from t's low bits (t - magic, in integer arithmetic):
  // AVX2 has no double-to-int64 conversion, and the compiler's stand-in for
  // one was a scalar loop. n in [-151, 129].
  v8l bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits - std::bit_cast<int64_t>(round_magic) + 1023) << 52;
  v8d scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return __builtin_convertvector(p * scale, v8f);
}

// out[i] = silu(gate[i]) * up[i] for 8 values, in float as the scalar
// gate / (1 + expf(-gate)) * up.
inline void swiglu8(const float* gate, const float* up, float* out) {
  v8f g, u;
  std::memcpy(&g, gate, sizeof g);
  std::memcpy(&u, up, sizeof u);
  const v8f o = g / (1.0f + expf8(-g)) * u;
  std::memcpy(out, &o, sizeof o);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) swiglu8(gate + i, up + i, out + i);
  if (i < n) {
    // The last few values through the same arithmetic (padded), so a
    // value's result never depends on where in the batch it sits.
    float g[8] = {}, u[8] = {}, o[8];
    const auto rest = static_cast<size_t>(n - i);
    std::memcpy(g, gate + i, rest * sizeof(float));
    std::memcpy(u, up + i, rest * sizeof(float));
    swiglu8(g, u, o);
    std::memcpy(out + i, o, rest * sizeof(float));
  }
}

constexpr Kernels kernels{scale_max, exp_sum, swiglu};

}  // namespace
}  // namespace actorlm::cpu::activation_math
